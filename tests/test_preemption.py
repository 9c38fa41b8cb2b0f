"""A stop request reaching the processes of a multi-process run at different moments.

Two processes x 2 CPU devices train through the real CLI. SIGTERM goes to process 1 only, to
both 0.5 s apart (what schedulers and preemption notices do), or to both at once. Every time,
both processes must agree on one step, write one complete checkpoint there and exit 0; running
the same command again must finish the run with per-step losses bit-identical to a run that
was never interrupted.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from conftest import REPO
from multiprocess_helpers import Job

STEPS = 160  # long enough that the stop lands mid-run (JAX notices SIGTERM within a second)


def train_args(root: Path) -> list[str]:
    """A debug run on synthetic tokens logging every step, checkpointing only at the end."""
    return [
        "--config",
        str(REPO / "configs" / "llama_debug.py"),
        f"--config.run.dir={root}",
        f"--config.train.steps={STEPS}",
        "--config.train.log_every=1",
        "--config.train.seq_len=32",
        "--config.train.global_batch_size=4",
        "--config.train.progress=false",
        "--config.train.eval_batches=0",
        "--config.checkpoint.every=0",
        "--config.optim.lr=1e-2",
        "--config.optim.warmup_steps=1",
    ]


def losses(run_dir: Path) -> dict[int, float]:
    """{step: loss} from a run's metrics (a resumed run appends to the same file)."""
    records = [
        json.loads(line)
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        if line.strip()
    ]
    by_step: dict[int, float] = {}
    for record in records:
        if "loss" in record:
            assert record["step"] not in by_step, f"step {record['step']} logged twice"
            by_step[record["step"]] = record["loss"]
    return by_step


def checkpoint_steps(run_dir: Path) -> list[int]:
    """The committed checkpoint steps of a run."""
    return sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())


def wait_for_step(run_dir: Path, step: int, job: Job, timeout: float = 240) -> None:
    """Returns once process 0 has logged `step` (fails if a process exits first)."""
    deadline = time.monotonic() + timeout
    metrics = run_dir / "metrics.jsonl"
    while time.monotonic() < deadline:
        if metrics.exists() and any(
            f'"step": {step},' in line for line in metrics.read_text().splitlines()
        ):
            return
        assert all(p.poll() is None for p in job.procs), job.log(0) + job.log(1)
        time.sleep(0.05)
    raise AssertionError(f"step {step} was never logged:\n{job.log(0)}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[int, float]:
    """Per-step losses of the same two-process run, never interrupted."""
    root = tmp_path_factory.mktemp("reference")
    job = Job(train_args(root / "run"), root / "logs")
    assert job.wait() == [0, 0], job.log(0) + job.log(1)
    by_step = losses(root / "run")
    assert sorted(by_step) == list(range(1, STEPS + 1))
    return by_step


SCHEDULES = {  # seconds after the trigger at which each process gets SIGTERM
    "process-1-only": {1: 0.0},
    "both-0.5s-apart": {0: 0.0, 1: 0.5},
    "both-at-once": {0: 0.0, 1: 0.0},
}


@pytest.mark.slow  # two two-process runs (compiles in three processes at once on two cores)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_sigterm_stops_every_process_at_one_step_and_the_rerun_matches(
    tmp_path, reference, schedule
):
    run_dir = tmp_path / "run"
    job = Job(train_args(run_dir), tmp_path / "logs")
    wait_for_step(run_dir, 3, job)
    start = time.monotonic()
    for pid, delay in sorted(SCHEDULES[schedule].items(), key=lambda item: item[1]):
        time.sleep(max(0.0, start + delay - time.monotonic()))
        job.procs[pid].send_signal(signal.SIGTERM)
    codes = job.wait(timeout=180)
    logs = job.log(0) + "\n----\n" + job.log(1)
    assert codes == [0, 0], logs

    # One checkpoint, at the step both processes agreed on, mid-run.
    [stopped] = checkpoint_steps(run_dir)
    assert 3 < stopped < STEPS, logs
    assert f"every process stops after step {stopped}" in job.log(0, tail=None)
    assert (
        f"stopped by SIGTERM or a preemption notice on one of the processes at step "
        f"{stopped}" in job.log(0)
    )
    assert sorted(losses(run_dir)) == list(range(1, stopped + 1))

    # The same command again resumes there and finishes exactly like the uninterrupted run.
    rerun = Job(train_args(run_dir), tmp_path / "logs-rerun")
    assert rerun.wait() == [0, 0], rerun.log(0) + rerun.log(1)
    assert f"resumed from step {stopped}" in rerun.log(0, tail=None)
    assert losses(run_dir) == reference
    assert checkpoint_steps(run_dir)[-1] == STEPS
