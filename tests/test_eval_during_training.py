"""lm-evaluation-harness tasks in the training loop (`eval.harness_*`), and `jaxtrain eval` on
the run's checkpoint afterwards: the same figure for the same step, shown by `runs` and `plot`."""

from __future__ import annotations

import json

import jax
import pytest
from checkpoint_fixtures import small_config
from conftest import REPO
from jax.experimental.compilation_cache import compilation_cache as jax_cache

from jaxtrain.cli import main
from jaxtrain.errors import ConfigError
from jaxtrain.hardware import backend as backend_lib
from jaxtrain.hardware import compile_cache
from jaxtrain.rundir.metrics import read_jsonl
from jaxtrain.trainer import Trainer

pytest.importorskip("lm_eval", reason="needs the eval extra: pip install lm-eval")

MC = REPO / "tests" / "fixtures" / "harness" / "jaxtrain_mc.yaml"
KEY = "harness/jaxtrain_mc/acc"


def _broken_task(folder):
    """A local task whose data file is missing, as a hub task is on a node without internet."""
    folder.mkdir()
    text = MC.read_text().replace("task: jaxtrain_mc", "task: jaxtrain_missing")
    (folder / "missing.yaml").write_text(text.replace("mc.jsonl", "absent.jsonl"))
    return folder / "missing.yaml"


def test_harness_tasks_are_logged_every_harness_every_steps_and_eval_agrees(
    tmp_path, tiny_tokenizer, capsys, jax_cache_setting
):
    run, cache = tmp_path / "run", tmp_path / "cache"
    cfg = small_config(
        run,
        **{
            "data.tokenizer": str(tiny_tokenizer),
            "backend.compile_cache": str(cache),
            "eval.harness_tasks": f"{MC},{_broken_task(tmp_path / 'broken')}",
            "eval.harness_every": 2,
            "eval.harness_limit": 40,
            "checkpoint.every": 4,  # step 2 is evaluated but not saved
        },
    )
    trainer = Trainer(cfg, console=False)
    evaluated = []  # (step evaluated, step of the parameters it was given)

    class Watched:
        """The trainer's own harness evaluator, noting which parameters it is given."""

        def __init__(self, inner):
            self.inner = inner

        def due(self, step):
            return self.inner.due(step)

        def __call__(self, step, params):
            if self.inner.due(step):
                evaluated.append((step, int(jax.device_get(trainer.state["step"]))))
            return self.inner(step, params)

    trainer.harness = Watched(trainer.harness)
    try:
        trainer.run(4)  # training goes on past the failing task
        assert trainer.step == 4
    finally:
        trainer.close()
    # Each evaluation sees the parameters of its own step, not of the one dispatched after it.
    assert evaluated == [(2, 2), (4, 4)]
    out = capsys.readouterr().out
    assert out.count("harness task jaxtrain_missing failed and is skipped") == 1
    assert "harness at step 2" in out and "harness at step 4" in out

    records = [r for r in read_jsonl(run / "metrics.jsonl") if KEY in r]
    assert [r["step"] for r in records] == [2, 4]
    for r in records:
        assert 0.0 <= r[KEY] <= 1.0 and r[f"{KEY}_stderr"] > 0 and r["harness/seconds"] > 0
        assert not any("jaxtrain_missing" in k for k in r)

    result_file = tmp_path / "results.json"
    argv = ["eval", "--run", str(run), "--step", "4", "--tasks", str(MC), "--limit", "40"]
    # `eval` starts with JAX's own cache setting, as a process of its own does, and takes the
    # run's cache.
    jax_cache.reset_cache()
    jax.config.update("jax_compilation_cache_dir", jax_cache_setting)
    assert main([*argv, "--output", str(result_file)]) == 0
    run_cache = cache / compile_cache.device_folder_name(backend_lib.detect())
    assert jax.config.jax_compilation_cache_dir == str(run_cache)
    assert f"[step 4 of {run}]" in capsys.readouterr().out
    results = json.loads(result_file.read_text())
    assert results["results"]["jaxtrain_mc"]["acc,none"] == records[-1][KEY]
    assert results["results"]["jaxtrain_mc"]["acc_stderr,none"] == records[-1][f"{KEY}_stderr"]
    assert results["jaxtrain"] == {"run": str(run), "step": 4, "failed_tasks": []}

    assert main(["runs", str(run)]) == 0
    assert f"jaxtrain_mc acc {records[-1][KEY]:.4f}" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    assert main(["plot", str(run), "--only", "harness", "--out", str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "harness.png").stat().st_size > 0


def test_harness_tasks_need_the_runs_tokenizer(tmp_path):
    cfg = small_config(tmp_path / "run", **{"eval.harness_tasks": str(MC), "eval.harness_every": 2})
    with pytest.raises(ConfigError, match="eval.harness_tasks needs the run's tokenizer"):
        Trainer(cfg, console=False)


def test_eval_names_a_missing_task_file(tmp_path, capsys):
    missing = tmp_path / "nope.yaml"
    assert main(["eval", "--hf", str(tmp_path), "--tasks", str(missing)]) == 2
    assert f"task file {missing} does not exist." in capsys.readouterr().err
