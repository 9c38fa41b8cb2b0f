"""One trainer per run directory: a second is refused naming the holder; a dead holder's lock is
taken over; the lock goes with close() and with failures."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import pytest
from checkpoint_fixtures import CLI_OVERRIDES, small_config
from conftest import REPO

from jaxtrain.cli import main
from jaxtrain.rundir import lock as run_lock
from jaxtrain.rundir.lock import LOCK_NAME, RunLock, RunLockError
from jaxtrain.trainer import Trainer

DEVICES = jax.devices()[:1]
HOST = socket.gethostname()

_HOLDER = """
import sys, time
from jaxtrain.rundir.lock import RunLock
lock = RunLock(sys.argv[1])
lock.acquire()
print("locked", flush=True)
time.sleep(600)
"""


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock of tmp_path/run until it is killed."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(run_dir)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout.readline().strip() == "locked"
    yield proc, run_dir
    proc.kill()
    proc.wait(timeout=30)


def _busy_line(run_dir: Path, pid: int) -> str:
    return (
        f"run directory {run_dir} is in use by another trainer (pid {pid} on host {HOST}; "
        f"lock file {run_dir / LOCK_NAME}): wait for it to finish or stop it, or point "
        "run.dir at another folder."
    )


def test_a_second_trainer_on_the_same_run_dir_is_refused_until_close(tmp_path):
    run_dir = tmp_path / "run"
    first = Trainer(small_config(run_dir), devices=DEVICES, console=False)
    with pytest.raises(RunLockError) as info:
        Trainer(small_config(run_dir), devices=DEVICES, console=False)
    assert (
        str(info.value)
        == _busy_line(run_dir, os.getpid())
        + " The holder is this process (another Trainer): close() it first."
    )
    first.close()  # a notebook's trainer frees the folder on close()
    second = Trainer(small_config(run_dir), devices=DEVICES, console=False)
    second.close()
    assert (run_dir / LOCK_NAME).read_text() == ""  # nothing held, nothing recorded


def test_a_trainer_that_fails_to_start_releases_the_lock(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(Exception, match="model.num_heads"):
        Trainer(small_config(run_dir, **{"model.num_heads": 3}), devices=DEVICES, console=False)
    RunLock(run_dir).acquire()  # free


def test_another_process_holding_the_run_dir_stops_the_cli_in_one_line(holder, capsys):
    proc, run_dir = holder
    args = [
        "--config",
        str(REPO / "configs" / "llama_debug.py"),
        *(f"--config.{k}={v}" for k, v in {**CLI_OVERRIDES, "run.dir": run_dir}.items()),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == f"jaxtrain train: error: {_busy_line(run_dir, proc.pid)}\n"
    assert not (run_dir / "metrics.jsonl").exists()


def test_the_lock_of_a_killed_trainer_is_taken_over(holder, capsys):
    proc, run_dir = holder
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    lock = RunLock(run_dir)
    lock.acquire()
    assert capsys.readouterr().out == (
        f"taking over the lock of run directory {run_dir} left by pid {proc.pid} on host "
        f"{HOST}, which stopped without releasing it\n"
    )
    assert json.loads((run_dir / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()


def _no_flock(*_args):
    raise OSError(errno.ENOLCK, "No locks available")


def _write_record(run_dir: Path, pid: int, host: str = HOST) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": host}))


def test_without_flock_the_recorded_pid_and_host_decide(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_lock.fcntl, "flock", _no_flock)
    run_dir = tmp_path / "run"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        _write_record(run_dir, sleeper.pid)
        with pytest.raises(RunLockError, match=f"pid {sleeper.pid} on host {HOST}"):
            RunLock(run_dir).acquire()
    finally:
        sleeper.kill()
        sleeper.wait(timeout=30)
    lock = RunLock(run_dir)
    lock.acquire()  # the recorded pid is gone: taken over
    assert f"left by pid {sleeper.pid} on host {HOST}" in capsys.readouterr().out
    with pytest.raises(RunLockError, match=f"pid {os.getpid()}"):
        RunLock(run_dir).acquire()  # a second trainer of this very process
    lock.release()

    _write_record(run_dir, 12345, "elsewhere")
    with pytest.raises(
        RunLockError,
        match=f"cannot be checked from here: if it has stopped, delete {run_dir / LOCK_NAME}",
    ):
        RunLock(run_dir).acquire()


def test_a_sigterm_stopped_run_frees_the_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "jaxtrain",
        "--config",
        "configs/llama_debug.py",
        *(
            f"--config.{k}={v}"
            for k, v in {**CLI_OVERRIDES, "run.dir": run_dir, "train.steps": 1000}.items()
        ),
    ]
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        metrics = run_dir / "metrics.jsonl"
        deadline = time.monotonic() + 240
        while not (metrics.exists() and metrics.read_text()) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.05)  # a step is logged: the run's signal handlers are installed
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert (run_dir / LOCK_NAME).read_text() == ""
    lock = RunLock(run_dir)
    lock.acquire()
    lock.release()
