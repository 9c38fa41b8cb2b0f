"""Two real processes started the way clusters start them train exactly like `--num-processes 2`.

Open MPI's `mpirun -np 2 python -m jaxtrain ...` (jaxtrain reads OMPI_COMM_WORLD_* and finds
both ranks on this host) and a Kubernetes indexed Job's pods (JOB_COMPLETION_INDEX, the
coordinator in MASTER_ADDR, the count in JAXTRAIN_NUM_PROCESSES) must give the per-step losses
of the project's own two-process launch, bit for bit. Open MPI comes from the distribution's
`openmpi-bin` (.ci/run installs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from multiprocess_helpers import Job, child_env, free_port
from test_preemption import losses

pytestmark = pytest.mark.slow

STEPS = 5


def train_args(run: Path) -> list[str]:
    """A short debug run logging every step."""
    return [
        "--config",
        str(REPO / "configs" / "llama_debug.py"),
        f"--config.run.dir={run}",
        f"--config.train.steps={STEPS}",
        "--config.train.log_every=1",
        "--config.train.seq_len=32",
        "--config.train.global_batch_size=4",
        "--config.train.progress=false",
        "--config.train.eval_batches=0",
    ]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[int, float]:
    """Per-step losses of the same run started with `--num-processes 2`."""
    root = tmp_path_factory.mktemp("flags")
    job = Job(train_args(root / "run"), root / "logs")
    assert job.wait() == [0, 0], job.log(0) + job.log(1)
    found = losses(root / "run")
    assert sorted(found) == list(range(1, STEPS + 1))
    return found


@pytest.mark.skipif(
    shutil.which("mpirun") is None,
    reason="Open MPI is not installed (apt-get install openmpi-bin; .ci/run installs it)",
)
def test_mpirun_trains_like_two_flagged_processes(tmp_path, reference):
    env = child_env(2)
    if os.geteuid() == 0:  # Open MPI refuses root unless told twice
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run(
        ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"]
        + [sys.executable, "-m", "jaxtrain", *train_args(tmp_path / "run")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "process 0 of 2 (openmpi) serving the coordinator at 127.0.0.1:" in out
    assert losses(tmp_path / "run") == reference


def test_kubernetes_indexed_job_trains_like_two_flagged_processes(tmp_path, reference):
    port = free_port()
    procs, logs = [], []
    for index in range(2):
        env = child_env(
            2,
            JOB_COMPLETION_INDEX=str(index),
            MASTER_ADDR="127.0.0.1",  # in a cluster: <job>-0.<headless service>
            MASTER_PORT=str(port),
            JAXTRAIN_NUM_PROCESSES="2",
        )
        logs.append(tmp_path / f"pod{index}.log")
        with open(logs[-1], "w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "jaxtrain", *train_args(tmp_path / "run")],
                    env=env,
                    cwd=REPO,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        codes = [p.wait(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    out = "".join(log.read_text()[-3000:] for log in logs)
    assert codes == [0, 0], out
    assert "process 0 of 2 (kubernetes indexed Job)" in logs[0].read_text()
    assert losses(tmp_path / "run") == reference
