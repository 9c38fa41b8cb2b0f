"""lm-evaluation-harness on jaxtrain parameters: the same scores as the harness's own Hugging
Face backend on an exported model, request by request, and the stop sequences of generation.

The tasks are the local ones of tests/fixtures/harness (JSONL data beside their YAMLs), so
nothing is downloaded. The model is a random two-layer Llama with max_seq_len 128 (shorter
than some perplexity texts, so the rolling windows matter), split over 8 fake devices.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import REPO

lm_eval = pytest.importorskip("lm_eval", reason="needs the eval extra: pip install lm-eval")
pytest.importorskip("accelerate", reason="the harness's HF backend needs accelerate")

import jax  # noqa: E402
from checkpoint_fixtures import small_config  # noqa: E402
from flax import nnx  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from jaxtrain import run as run_lib  # noqa: E402
from jaxtrain.cli import main  # noqa: E402
from jaxtrain.evaluation import tasks as tasks_lib  # noqa: E402
from jaxtrain.evaluation.harness_model import JaxtrainLM  # noqa: E402
from jaxtrain.evaluation.scoring import Scorer, length_buckets  # noqa: E402
from jaxtrain.interop.hf import save_hf_checkpoint  # noqa: E402
from jaxtrain.models.assembly.decoder import build_model  # noqa: E402

TASKS = REPO / "tests" / "fixtures" / "harness"
MAX_LEN = 128


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_tokenizer):
    """(jaxtrain's harness model on a 2 x 4 mesh, the same weights exported to HF)."""
    tmp = tmp_path_factory.mktemp("harness")
    cfg = small_config(
        tmp / "run", **{"model.max_seq_len": MAX_LEN, "mesh.ici_data": 2, "mesh.ici_fsdp": 4}
    )
    setup = run_lib.setup(cfg, check_data=False)
    params = nnx.to_pure_dict(nnx.state(build_model(setup.spec, seed=3)))
    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer)
    save_hf_checkpoint(
        setup.spec,
        params,
        tmp / "hf",
        tokenizer_dir=tiny_tokenizer,
        config_extra={"eos_token_id": tokenizer.eos_token_id},
    )
    params = jax.device_put(params, setup.layout.shardings["params"])
    ours = JaxtrainLM(Scorer(setup.layout.graphdef, params, setup.spec, setup=setup), tokenizer)
    reference = HFLM(
        pretrained=str(tmp / "hf"), device="cpu", dtype="float32", batch_size=64, max_length=MAX_LEN
    )
    return ours, reference, tmp / "hf"


@pytest.fixture(scope="module")
def evaluated(models):
    """(jaxtrain's results, the HF backend's) on every fixture task, with each request."""
    ours, reference, _ = models
    tasks = tasks_lib.resolve_tasks([str(TASKS)])
    assert [tasks_lib.task_label(t) for t in tasks] == [
        "jaxtrain_gen",
        "jaxtrain_mc",
        "jaxtrain_ppl",
    ]
    return _evaluate(ours, tasks), _evaluate(reference, tasks)


def _evaluate(lm, tasks):
    return lm_eval.simple_evaluate(
        model=lm,
        tasks=tasks,
        log_samples=True,
        bootstrap_iters=100,
        task_manager=tasks_lib.task_manager(False),  # local tasks only: no index of the hub's
    )


def _responses(results, task, field=0):
    """Every request's answer in document order: a log-likelihood (field 0) or whether the
    continuation is greedy (field 1) of a loglikelihood request; a rolling one's total."""
    answers = [r for s in results["samples"][task] for resp in s["resps"] for r in resp]
    return [a[field] if isinstance(a, tuple | list) else a for a in answers]


def test_every_request_scores_as_the_harness_hf_backend_does(evaluated):
    got, want = evaluated
    assert len(got["samples"]["jaxtrain_mc"]) == 300
    for task in ("jaxtrain_mc", "jaxtrain_ppl"):
        ours_ll, ref_ll = _responses(got, task), _responses(want, task)
        assert len(ours_ll) == len(ref_ll) > 0
        # Per request within 1e-4 (a whole text's sum, hundreds of tokens, within 1e-6 of it).
        np.testing.assert_allclose(ours_ll, ref_ll, rtol=1e-6, atol=1e-4)
    assert _responses(got, "jaxtrain_mc", 1) == _responses(want, "jaxtrain_mc", 1)
    for metric in ("acc,none", "acc_norm,none"):
        assert got["results"]["jaxtrain_mc"][metric] == want["results"]["jaxtrain_mc"][metric]
    texts = [s["resps"][0][0] for s in got["samples"]["jaxtrain_gen"]]
    assert texts == [s["resps"][0][0] for s in want["samples"]["jaxtrain_gen"]]
    assert not any(stop in t for t in texts for stop in ("\n", ".", "the"))
    assert got["results"]["jaxtrain_gen"] == want["results"]["jaxtrain_gen"]


def test_generation_ends_at_the_first_stop_sequence(models):
    ours = models[0]

    def generate(until):
        request = Instance(
            "generate_until",
            doc={},
            arguments=("Count on: one two three", {"until": until, "max_gen_toks": 12}),
            idx=0,
        )
        return ours.generate_until([request])[0]

    free = generate([])
    assert len(free) > 4
    stop = free[2:4]  # a stop sequence the free continuation holds, past its start
    assert generate([stop]) == free.split(stop)[0]


def test_length_buckets_are_few_and_cover_the_model():
    assert length_buckets(512) == [32, 64, 128, 256, 512]
    assert length_buckets(100, multiple=8) == [32, 64, 104]


def test_a_local_task_reads_its_data_beside_its_yaml(tmp_path):
    (task,) = tasks_lib.resolve_tasks([str(TASKS / "jaxtrain_mc.yaml")])
    assert task["dataset_kwargs"]["data_files"] == {"test": str(TASKS / "mc.jsonl")}
    with pytest.raises(tasks_lib.ConfigError, match="holds no .yaml task files"):
        tasks_lib.resolve_tasks([str(tmp_path)])


def test_eval_command_on_a_hugging_face_folder(models, evaluated, tmp_path, capsys):
    out = tmp_path / "results.json"
    argv = ["eval", "--hf", str(models[2]), "--tasks", str(TASKS / "jaxtrain_mc.yaml")]
    assert main([*argv, "--limit", "50", "--output", str(out)]) == 0
    assert f"[{models[2]}]" in capsys.readouterr().out
    results = json.loads(out.read_text())
    first = [s for s in evaluated[1]["samples"]["jaxtrain_mc"] if s["doc_id"] < 50]
    assert results["results"]["jaxtrain_mc"]["acc,none"] == np.mean([s["acc"] for s in first])


def test_a_pipeline_parallel_mesh_scores_and_generates_as_one_device(tmp_path):
    cfg = small_config(
        tmp_path / "run",
        **{"model.max_seq_len": MAX_LEN, "mesh.ici_pipeline": 2, "mesh.ici_fsdp": 4},
    )
    setup = run_lib.setup(cfg, check_data=False)
    params = nnx.to_pure_dict(nnx.state(build_model(setup.spec, seed=3)))
    alone = Scorer(setup.layout.graphdef, params, setup.spec)
    placed = jax.device_put(params, setup.layout.shardings["params"])
    staged = Scorer(setup.layout.graphdef, placed, setup.spec, setup=setup)
    requests = [(list(range(1, 20 + 3 * i)), 1 + i % 4) for i in range(10)]
    np.testing.assert_allclose(
        [s for s, _ in staged.loglikelihoods(requests)],
        [s for s, _ in alone.loglikelihoods(requests)],
        atol=1e-4,
    )
    never = lambda tokens: False
    assert staged.greedy_continuation([5, 6, 7], 6, never) == alone.greedy_continuation(
        [5, 6, 7], 6, never
    )
