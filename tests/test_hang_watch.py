"""A run whose steps stop completing ends with every thread's stack and a one-line cause.

The watch itself (jaxtrain/train/hang_watch.py) is checked on a thread, then a real two-process
run has its grain data worker frozen with SIGSTOP: the frozen process must print its stacks and
the cause (waiting for data, at which step, where the run resumes) and exit 4 within
`train.hang_timeout` + 60 s, and the other process must stop too, naming it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from multiprocess_helpers import Job

from jaxtrain.train.hang_watch import DATA_WAIT, DEVICE_WAIT, EXIT_HUNG, HangWatch, phase_of

HANG_TIMEOUT = 15


def test_watch_starts_at_the_first_completed_step_and_reports_the_stuck_call():
    reports: list[str] = []
    watch = HangWatch(0.3, on_hang=reports.append, poll_s=0.05)
    with watch:
        time.sleep(0.6)  # compiling, restoring: no step yet, nothing counts
        assert reports == []
        watch.completed(7)
        time.sleep(0.6)
    assert len(reports) == 1
    assert "no training step completed" in reports[0] and "after step 7" in reports[0]
    assert "train.hang_timeout=0.3" in reports[0]


def test_watch_is_quiet_while_steps_complete_and_after_the_run():
    reports: list[str] = []
    with HangWatch(0.3, on_hang=reports.append, poll_s=0.05) as watch:
        for step in range(1, 8):
            watch.completed(step)
            time.sleep(0.1)
    time.sleep(0.5)  # a notebook idling between runs is not hung
    assert reports == []


def frame_under(method: str, inner_file: str):
    """A stack as the watch sees it: the trainer's `method` calling code in `inner_file`."""
    inner: dict = {}
    exec(
        compile("import sys\ndef read():\n    return sys._getframe()\n", inner_file, "exec"), inner
    )
    outer = {"read": inner["read"]}
    source = f"def {method}():\n    return read()\n"
    exec(compile(source, os.path.join("jaxtrain", "trainer.py"), "exec"), outer)
    return outer[method]()


def test_phase_is_read_from_the_stuck_threads_stack():
    grain_file = os.path.join("site-packages", "grain", "prefetch.py")
    assert phase_of(frame_under("_dispatch", grain_file)) == DATA_WAIT
    assert phase_of(frame_under("_dispatch", "jax_call.py")) == "dispatching the next step"
    assert phase_of(frame_under("save", "orbax.py")) == "writing a checkpoint"
    assert phase_of(frame_under("_after_step", "jax_call.py")) == DEVICE_WAIT
    assert "outside the training loop" in phase_of(sys._getframe())


def children(pid: int) -> list[int]:
    """Direct child processes of `pid` (from /proc, as `ps` would)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def data_worker(pid: int) -> int | None:
    """The grain worker process of a training process (not multiprocessing's tracker)."""
    for child in children(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            return child
    return None


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_frozen_data_worker_ends_the_run_with_stacks_and_a_cause(tmp_path):
    run = tmp_path / "run"
    job = Job(
        [
            "--config",
            str(REPO / "configs" / "llama_debug.py"),
            f"--config.run.dir={run}",
            "--config.train.steps=100000",
            "--config.train.seq_len=32",
            "--config.train.global_batch_size=4",
            "--config.train.log_every=1",
            "--config.train.progress=false",
            "--config.train.eval_batches=0",
            "--config.checkpoint.every=20",
            "--config.data.worker_count=1",
            f"--config.train.hang_timeout={HANG_TIMEOUT}",
        ],
        tmp_path / "logs",
    )
    worker = other_worker = None
    try:
        metrics = run / "metrics.jsonl"
        deadline = time.monotonic() + 240
        while not (metrics.exists() and '"step": 25,' in metrics.read_text()):
            assert time.monotonic() < deadline, job.log(0) + job.log(1)
            assert all(p.poll() is None for p in job.procs), job.log(0) + job.log(1)
            time.sleep(0.2)
        worker = data_worker(job.procs[1].pid)
        other_worker = data_worker(job.procs[0].pid)
        assert worker is not None and other_worker is not None, "no grain worker processes"
        os.kill(worker, signal.SIGSTOP)
        frozen_at = time.monotonic()
        codes = job.wait(timeout=HANG_TIMEOUT + 60)
        took = time.monotonic() - frozen_at
        # No data worker outlives its process (under Slurm an orphan holds the job step open).
        deadline = time.monotonic() + 10
        while alive(worker) or alive(other_worker):
            assert time.monotonic() < deadline, "a data worker outlived its training process"
            time.sleep(0.2)
    finally:
        job.kill()
        for pid in (worker, other_worker):
            for sig in (signal.SIGCONT, signal.SIGKILL) if pid is not None else ():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
    hung, other = job.log(1, tail=None), job.log(0)
    assert codes[1] == EXIT_HUNG, hung[-3000:]
    assert took < HANG_TIMEOUT + 60
    assert "stacks of every thread" in hung and "in _dispatch" in hung  # the main thread's stack
    cause = [line for line in hung.splitlines() if line.startswith("jaxtrain train: error: hung")]
    assert len(cause) == 1, hung[-3000:]
    assert "on process 1 of 2" in cause[0]
    assert "waiting for the next batch from the data pipeline" in cause[0]
    assert f"train.hang_timeout={HANG_TIMEOUT}" in cause[0]
    assert "resume from checkpoint step" in cause[0], cause[0]
    # The other process stops too (it would wait in its next collective forever), naming it.
    assert codes[0] != 0
    assert "process 1 of 2 stopped with an error" in other, other
