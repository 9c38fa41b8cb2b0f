"""tools/launch_slurm.sbatch, unmodified, under a real two-node Slurm on 127.0.0.1.

The cluster (munged, slurmctld, two slurmd; tests/slurm_cluster.py) starts once per test run
from Debian's `slurm-wlm` and `munge`, which .ci/run installs when missing. Each job runs two
tasks x 2 CPU devices. What users rely on:

- a 2-node job trains like one process with the same 4 devices;
- `scontrol requeue` mid-run stops both tasks at one agreed step with a checkpoint, and the
  requeued job finishes with the losses of an uninterrupted job, bit for bit;
- a job with a 2-minute time limit finishes a longer run over several allocations (USR1
  before the limit, a checkpoint, `scontrol requeue` by the script itself) with the losses of
  an uninterrupted job, bit for bit.

The test cluster holds a requeued job
for 10 s before it may start again (a real one: two minutes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from multiprocess_helpers import child_env
from slurm_cluster import Cluster, missing_programs
from test_preemption import losses

pytestmark = pytest.mark.slow

SBATCH = REPO / "tools" / "launch_slurm.sbatch"
SHORT = 40  # steps of the parity and requeue jobs
DONE = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def overrides(run: Path, steps: int) -> list[str]:
    """A debug run logging every step, checkpointing only when stopped and at the end."""
    return [
        f"--config.run.dir={run}",
        f"--config.train.steps={steps}",
        "--config.train.log_every=1",
        "--config.train.seq_len=32",
        "--config.train.global_batch_size=4",
        "--config.train.progress=false",
        "--config.train.eval_batches=0",
        "--config.checkpoint.every=0",
    ]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """A started two-node cluster, stopped at the end of the test run."""
    missing = missing_programs()
    if missing:
        pytest.skip(
            f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm "
            "munge (.ci/run installs them)"
        )
    if os.geteuid() != 0:
        pytest.skip("a test Slurm cluster runs slurmd as root; run the tests as root")
    started = Cluster(tmp_path_factory.mktemp("slurm"))
    yield started
    started.stop()


def submit(cluster: Cluster, folder: Path, steps: int, *sbatch_options: str) -> str:
    """Submits the project's sbatch script from `folder`; returns the job id."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**child_env(2), "SLURM_CONF": str(cluster.conf)}
    done = subprocess.run(
        ["sbatch", "--parsable", *sbatch_options, str(SBATCH)]
        + [str(REPO / "configs" / "llama_debug.py"), *overrides(folder / "run", steps)],
        env=env,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def wait(cluster: Cluster, job: str, folder: Path, timeout: float) -> str:
    """Waits for a job to end (through its requeues); returns its final state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = cluster.job_state(job)
        if state in DONE:
            return state
        time.sleep(1)
    cluster.run("scancel", job, check=False)
    raise AssertionError(f"job {job} still {state} after {timeout:.0f} s:\n{log(folder, job)}")


def log(folder: Path, job: str, tail: int | None = 4000) -> str:
    """A job's log (every allocation appends to it): its end, or all of it (tail=None),
    without the lines of gloo's and XLA's chatter."""
    path = folder / f"jaxtrain-{job}.out"
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    noise = ("[Gloo]", "Involuntary full rematerialization")
    text = "\n".join(x for x in lines if not any(n in x for n in noise))
    return text if tail is None else text[-tail:]


def one_process(folder: Path, steps: int) -> dict[int, float]:
    """Losses of the same run in one process with 4 devices."""
    done = subprocess.run(
        [sys.executable, "-m", "jaxtrain", "--config", str(REPO / "configs" / "llama_debug.py")]
        + overrides(folder / "run", steps),
        env=child_env(4),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return losses(folder / "run")


def step_time(run: Path) -> float:
    """A run's median logged step time (seconds)."""
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return float(np.median([r["step_time"] for r in records if "step_time" in r]))


@pytest.fixture(scope="module")
def two_nodes(cluster, tmp_path_factory) -> tuple[dict[int, float], float]:
    """(losses, step time) of an uninterrupted 2-node job of SHORT steps."""
    folder = tmp_path_factory.mktemp("two_nodes")
    job = submit(cluster, folder, SHORT)
    assert wait(cluster, job, folder, 600) == "COMPLETED", log(folder, job)
    assert cluster.restarts(job) == 0
    assert "finished (after 0 requeues)" in log(folder, job, tail=None)
    found = losses(folder / "run")
    assert sorted(found) == list(range(1, SHORT + 1))
    return found, step_time(folder / "run")


def test_two_node_job_trains_like_one_process(two_nodes, tmp_path):
    single = one_process(tmp_path, SHORT)
    steps = range(1, SHORT + 1)
    np.testing.assert_allclose(
        [two_nodes[0][s] for s in steps], [single[s] for s in steps], rtol=2e-5
    )


def test_requeue_mid_run_resumes_bit_for_bit(cluster, tmp_path, two_nodes):
    job = submit(cluster, tmp_path, SHORT)
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and '"step": 10,' in metrics.read_text()):
        assert time.monotonic() < deadline and cluster.job_state(job) not in DONE, log(
            tmp_path, job
        )
        time.sleep(0.2)
    cluster.run("scontrol", "requeue", job)
    assert wait(cluster, job, tmp_path, 600) == "COMPLETED", log(tmp_path, job)
    text = log(tmp_path, job, tail=None)
    assert cluster.restarts(job) == 1, text[-4000:]
    assert "every process stops after step" in text and "resumed from step" in text, text[-4000:]
    assert losses(tmp_path / "run") == two_nodes[0]


def test_time_limited_job_finishes_over_several_allocations(cluster, tmp_path, two_nodes):
    # 30 s of steps at this host's measured pace: more than the first allocation trains. Slurm
    # sends USR1 up to a minute before the `@60` asks, so 0-60 s after the job starts (about
    # 40 s seen); the job spends ~15 s of that starting and shares the CPUs with the reference
    # job (which trains at about half pace beside it), so it trains at most ~22 s of steps.
    steps = int(min(3000, max(100, 30 / two_nodes[1])))
    limited = submit(cluster, tmp_path / "limited", steps, "--time=2", "--signal=B:USR1@60")
    reference = submit(cluster, tmp_path / "reference", steps)  # alongside, never stopped
    state = wait(cluster, reference, tmp_path / "reference", 1200)
    assert state == "COMPLETED", log(tmp_path / "reference", reference)
    assert wait(cluster, limited, tmp_path / "limited", 1200) == "COMPLETED", log(
        tmp_path / "limited", limited
    )
    text = log(tmp_path / "limited", limited, tail=None)
    assert cluster.restarts(limited) >= 1, text[-4000:]
    assert "the time limit is near (USR1)" in text and "requeueing job" in text, text[-4000:]
    expected = losses(tmp_path / "reference" / "run")
    assert sorted(expected) == list(range(1, steps + 1))
    assert losses(tmp_path / "limited" / "run") == expected
