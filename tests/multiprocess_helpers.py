"""Starting several jaxtrain processes on 127.0.0.1 from a test (each with its own CPU devices).

The processes run the real CLI (`python -m jaxtrain ... --coordinator --num-processes
--process-id`), as a launcher would on a cluster, with logs in files the test can read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO

# Process I on CPU I, as on hosts that do not share their CPUs (`Job(cpus=...)`, `busy_cpu`).
_needs_taskset = pytest.mark.skipif(
    shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2,
    reason="needs taskset (util-linux) and two CPUs",
)


def pinned(test):
    """A test of processes pinned to CPUs and timed against each other: it needs taskset and two
    CPUs, and the CPUs to itself (`alone`: another test's load would slow the wrong process)."""
    return pytest.mark.alone(_needs_taskset(test))


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(devices: int, **extra: str) -> dict[str, str]:
    """The test environment with `devices` CPU devices per process and no launcher variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JAXTRAIN_", "SLURM_", "OMPI_"))
        and k not in ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
    }
    env.update(
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices} "
        "--xla_backend_optimization_level=0",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(REPO),
        **extra,
    )
    return env


class Job:
    """`count` processes of `python -m jaxtrain ARGS`, joined through a fresh coordinator port."""

    def __init__(
        self,
        args: list[str],
        logs: Path,
        *,
        count: int = 2,
        devices: int = 2,
        env: dict[str, str] | None = None,
        cpus: list[int] | None = None,
    ):
        """`cpus`: process I runs on CPU cpus[I] only (taskset)."""
        port = free_port()
        logs.mkdir(parents=True, exist_ok=True)
        self.logs = [logs / f"process{i}.log" for i in range(count)]
        self.procs = []
        for pid in range(count):
            with open(self.logs[pid], "w") as log:
                self.procs.append(
                    subprocess.Popen(
                        [
                            *(["taskset", "-c", str(cpus[pid])] if cpus else []),
                            sys.executable,
                            "-m",
                            "jaxtrain",
                            *args,
                            "--coordinator",
                            f"127.0.0.1:{port}",
                            "--num-processes",
                            str(count),
                            "--process-id",
                            str(pid),
                        ],
                        env={**child_env(devices), **(env or {})},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=REPO,
                    )
                )

    def wait(self, timeout: float = 300) -> list[int]:
        """Exit codes of every process (kills them all if one overruns `timeout`)."""
        deadline = time.monotonic() + timeout
        try:
            return [p.wait(timeout=max(deadline - time.monotonic(), 1)) for p in self.procs]
        finally:
            self.kill()

    def kill(self) -> None:
        """Kills whatever still runs."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def log(self, pid: int, tail: int | None = 4000) -> str:
        """A process's output: its end (for assertion messages), or all of it (tail=None)."""
        text = self.logs[pid].read_text(errors="replace")
        return text if tail is None else text[-tail:]


@contextlib.contextmanager
def busy_cpu(cpu: int, loops: int) -> Iterator[None]:
    """`loops` busy processes sharing CPU `cpu` while the block runs (a host made slow)."""
    hogs = [
        subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
        for _ in range(loops)
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
