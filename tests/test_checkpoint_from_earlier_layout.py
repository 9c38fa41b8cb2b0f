"""A checkpoint written by jaxtrain 0.1.0 at commit 1cf603c, before its modules were regrouped
into sub-packages, restores with today's code and resumes to the same losses.

`tests/fixtures/checkpoint_v0_1` is that run directory cut back to its step-4 checkpoint and its
`config.json`; `expected.json` there holds the command that wrote it and the losses it logged
for steps 5-8. Everything goes through the command line, so the test imports no jaxtrain module
and holds whichever way the package is laid out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
from conftest import REPO

FIXTURE = REPO / "tests" / "fixtures" / "checkpoint_v0_1"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())


def run_jaxtrain(*args: str) -> subprocess.CompletedProcess:
    """`python -m jaxtrain ARGS` from the repository root, on the devices the fixture was
    written with (8 CPU devices, the mesh its arrays are sharded over)."""
    return subprocess.run(
        [sys.executable, "-m", "jaxtrain", *args],
        cwd=REPO,
        env={**os.environ, **EXPECTED["env"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )


def override(key: str, value: object) -> str:
    """`--config.KEY=VALUE` as the command line takes it (booleans as true/false)."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return f"--config.{key}={text}"


def test_a_checkpoint_of_jaxtrain_0_1_resumes_to_the_losses_it_was_written_with(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE, run_dir, ignore=shutil.ignore_patterns("expected.json", "README.md"))
    step, last = EXPECTED["checkpoint_step"], EXPECTED["overrides"]["train.steps"]

    # The command that wrote the run, run again on the copy: the documented way to resume.
    result = run_jaxtrain(
        "--config",
        EXPECTED["config"],
        *(override(k, v) for k, v in EXPECTED["overrides"].items()),
        f"--config.run.dir={run_dir}",
    )
    assert result.returncode == 0, result.stdout
    assert f"resumed from step {step} " in result.stdout, result.stdout

    # The fixture has no metrics.jsonl: every record is this resume's, and it starts after
    # the checkpoint rather than from step 1.
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["loss"] for r in records if "loss" in r}
    expected = {int(s): loss for s, loss in EXPECTED["losses"].items()}
    assert sorted(losses) == sorted(expected) == list(range(step + 1, last + 1))
    # Not bit for bit: the losses were written on one CPU model, and another (or another XLA
    # build) may order float32 reductions differently; on the same machine they are identical.
    np.testing.assert_allclose(
        [losses[s] for s in sorted(expected)], [expected[s] for s in sorted(expected)], rtol=1e-5
    )
    val = {r["step"]: r["val_loss"] for r in records if "val_loss" in r}
    expected_val = {int(s): loss for s, loss in EXPECTED["val_loss"].items()}
    assert sorted(val) == sorted(expected_val)
    np.testing.assert_allclose(
        [val[s] for s in sorted(val)], [expected_val[s] for s in sorted(val)], rtol=1e-5
    )
    saved = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == [step, last]

    # Every array of the old step and of the new one reads back and matches its checksums.
    verify = run_jaxtrain("checkpoints", str(run_dir), "--verify")
    assert verify.returncode == 0, verify.stdout
    for checked in (step, last):
        assert f"step {checked}: OK" in verify.stdout, verify.stdout
