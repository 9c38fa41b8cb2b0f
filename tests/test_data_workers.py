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
