"""Harness tasks in a two-process run: every process runs every request on the shared mesh, and
the figures are those `jaxtrain eval` gives for the same checkpoint in one process."""

from __future__ import annotations

import json

import pytest
from conftest import REPO
from multiprocess_helpers import Job

from jaxtrain.cli import main
from jaxtrain.rundir.metrics import read_jsonl

pytest.importorskip("lm_eval", reason="needs the eval extra: pip install lm-eval")

TASKS = REPO / "tests" / "fixtures" / "harness"


@pytest.mark.slow  # two jax processes compile at once, then the same tasks in this one
def test_two_processes_evaluate_like_one(tmp_path, tiny_tokenizer):
    run = tmp_path / "run"
    tasks = f"{TASKS / 'jaxtrain_mc.yaml'},{TASKS / 'jaxtrain_gen.yaml'}"
    job = Job(
        [
            "--config",
            str(REPO / "configs" / "llama_debug.py"),
            f"--config.run.dir={run}",
            f"--config.data.tokenizer={tiny_tokenizer}",
            "--config.train.steps=2",
            "--config.train.seq_len=32",
            "--config.train.progress=false",
            f"--config.eval.harness_tasks={tasks}",
            "--config.eval.harness_every=2",
            "--config.eval.harness_limit=12",
        ],
        tmp_path / "logs",
        devices=2,
    )
    assert job.wait() == [0, 0], job.log(0) + job.log(1)
    for pid in (0, 1):
        assert "failed and is skipped" not in job.log(pid, tail=None)
    (record,) = [r for r in read_jsonl(run / "metrics.jsonl") if "harness/seconds" in r]
    assert record["step"] == 2

    out = tmp_path / "results.json"
    argv = ["eval", "--run", str(run), "--tasks", tasks, "--limit", "12", "--output", str(out)]
    assert main(argv) == 0
    results = json.loads(out.read_text())["results"]
    for task, metric in (
        ("jaxtrain_mc", "acc"),
        ("jaxtrain_mc", "acc_norm"),
        ("jaxtrain_gen", "exact_match"),
    ):
        assert record[f"harness/{task}/{metric}"] == results[task][f"{metric},none"], (task, metric)
