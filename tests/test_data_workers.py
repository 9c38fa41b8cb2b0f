"""grain's worker processes end with the trainer that started them, even when it is killed
with SIGKILL and can tell them nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A process that reads a dataset through two worker processes, then waits to be killed.
READER = """
import time
import grain
from jaxtrain.data import grain_options

it = grain_options.iterate(grain.MapDataset.range(10**6), prefetch=2, workers=2)
next(it)
print("reading", flush=True)
time.sleep(600)
"""


def _children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended while listed
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_worker_processes_end_within_seconds_of_a_sigkilled_trainer():
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    reader = subprocess.Popen(
        [sys.executable, "-c", READER], env=env, stdout=subprocess.PIPE, text=True
    )
    workers: list[int] = []
    try:
        assert reader.stdout.readline().strip() == "reading"
        workers = _children(reader.pid)
        assert len(workers) >= 2, workers  # grain's two workers (and its resource tracker)
        reader.send_signal(signal.SIGKILL)
        reader.wait(timeout=30)
        deadline = time.monotonic() + 15
        while [w for w in workers if _alive(w)] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "worker processes outlived the reader"
    finally:
        reader.kill()
        for worker in workers:
            if _alive(worker):
                os.kill(worker, signal.SIGKILL)


# A worker's first step, in a process of its own, given the process id of its creator.
WORKER = """
import sys, time
from jaxtrain.data import grain_options
grain_options.exit_with_parent(int(sys.argv[1]), 0, 1)
print("watching", flush=True)
time.sleep(60)
"""


def _worker_of(creator: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(creator)], env=env, stdout=subprocess.PIPE, text=True
    )


def test_a_worker_that_starts_after_its_creator_died_ends_at_once():
    """A slow worker (a loaded machine) can reach its first step after its creator is gone;
    its parent is then already another process, and it ends rather than wait for a change."""
    creator = subprocess.Popen([sys.executable, "-c", "pass"])
    creator.wait()
    worker = _worker_of(creator.pid)
    try:
        assert worker.wait(timeout=15) == 1
    finally:
        worker.kill()


def test_a_worker_started_by_another_process_ends_with_its_creator():
    """Workers started through a server process have that server as their parent: the
    worker watches its creator itself."""
    creator = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    worker = _worker_of(creator.pid)
    try:
        assert worker.stdout.readline().strip() == "watching"
        with pytest.raises(subprocess.TimeoutExpired):
            worker.wait(timeout=1)  # the creator still runs
        creator.wait()
        assert worker.wait(timeout=15) == 1
    finally:
        creator.kill()
        worker.kill()
