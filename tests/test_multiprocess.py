"""Multi-process training on one machine: 2 processes x 4 CPU devices over 127.0.0.1 (gloo).

The two processes train through the real CLI (`--coordinator/--num-processes/--process-id`) and
must log the same losses as one process with 8 devices; only process 0 writes the run's
config.json and metrics; the checkpoint is written jointly. Start-up and failure paths: an
unreachable coordinator is a clear error within the timeout, and a process that dies mid-run
brings the others down within the heartbeat timeout.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

from jaxtrain import distributed
from jaxtrain.__main__ import main
from jaxtrain.metrics import read_jsonl

WORKER = str(Path(__file__).resolve().parent / "multiprocess_worker.py")


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(devices: int, **extra: str) -> dict[str, str]:
    """The test environment with `devices` CPU devices per process and no launcher variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAXTRAIN_", "SLURM_", "OMPI_")) and
           k not in ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")}
    env.update(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices} "
                         "--xla_backend_optimization_level=0",
               JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), **extra)
    return env


def train_args(run_dir: Path, checkpoint_dir: Path) -> list[str]:
    """CLI arguments of a 4-step debug run on synthetic tokens, logging every step."""
    return ["--config", str(REPO / "configs" / "llama_debug.py"),
            f"--config.run.dir={run_dir}", f"--config.checkpoint.dir={checkpoint_dir}",
            "--config.train.steps=4", "--config.train.log_every=1", "--config.train.seq_len=32",
            "--config.train.progress=false", "--config.train.eval_batches=0",
            "--config.optim.lr=1e-2", "--config.optim.warmup_steps=1"]


@pytest.mark.slow  # about a minute on two cores: three jax processes compile at once
def test_two_processes_train_exactly_like_one(tmp_path):
    port = free_port()
    procs = []
    for pid in range(2):
        args = train_args(tmp_path / f"run{pid}", tmp_path / "ckpt")
        args += ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                 "--process-id", str(pid)]
        log = open(tmp_path / f"log{pid}", "w")
        procs.append(subprocess.Popen(
            [sys.executable, WORKER, "train", str(tmp_path / f"out{pid}.json"), "--", *args],
            env=child_env(4), stdout=log, stderr=subprocess.STDOUT, cwd=REPO))
    try:
        # The reference (1 process x 8 devices) trains here while the pair runs.
        assert main(["train", *train_args(tmp_path / "ref", tmp_path / "ref_ckpt")]) == 0
        for proc in procs:
            proc.wait(timeout=300)
    finally:
        for proc in procs:
            proc.kill()
    logs = [(tmp_path / f"log{pid}").read_text()[-3000:] for pid in range(2)]
    assert [p.returncode for p in procs] == [0, 0], logs

    reference = [r["loss"] for r in read_jsonl(tmp_path / "ref" / "metrics.jsonl") if "loss" in r]
    pair = [r["loss"] for r in read_jsonl(tmp_path / "run0" / "metrics.jsonl") if "loss" in r]
    assert len(reference) == 4
    np.testing.assert_allclose(pair, reference, rtol=2e-5)

    # Written once: run config and metrics by process 0 only; one checkpoint, finalised.
    assert (tmp_path / "run0" / "config.json").is_file()
    assert not (tmp_path / "run1" / "config.json").exists()
    assert not (tmp_path / "run1" / "metrics.jsonl").exists()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.name.isdigit()) == ["4"]

    # The hybrid mesh: dcn_data=2 across processes, ici_fsdp=4 inside each, so every row of
    # the data axis (and the fast fsdp axis within it) lives in one process.
    for pid in range(2):
        out = json.loads((tmp_path / f"out{pid}.json").read_text())
        assert out["process_count"] == 2 and out["process_index"] == pid
        assert out["mesh"] == dict(data=2, fsdp=4, context=1, expert=1, tensor=1)
        assert out["owners_by_data_row"] == [[0] * 4, [1] * 4]


def test_unreachable_coordinator_is_a_clear_error_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(distributed.DistributedError,
                       match=r"process 1 of 2 could not reach the coordinator at "
                             r"127\.0\.0\.1:\d+ within 2 s"):
        distributed.initialize_from_env(2, coordinator=f"127.0.0.1:{free_port()}",
                                        num_processes=2, process_id=1)
    assert time.monotonic() - start < 10


def test_a_dead_process_stops_the_others_within_the_heartbeat_timeout(tmp_path):
    port = free_port()
    procs = []
    for pid in range(2):
        env = child_env(2, JAXTRAIN_COORDINATOR=f"127.0.0.1:{port}", JAXTRAIN_NUM_PROCESSES="2",
                        JAXTRAIN_PROCESS_ID=str(pid), JAXTRAIN_HEARTBEAT_TIMEOUT="5")
        procs.append(subprocess.Popen([sys.executable, WORKER, "spin"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, cwd=REPO))
    survivor, victim = procs
    try:
        # Both processes are inside the collective loop once one of them has printed a round.
        line = ""
        while "round" not in line:
            line = survivor.stdout.readline()
            assert line or survivor.poll() is None, "process 0 exited before training"
        victim.kill()
        killed = time.monotonic()
        code = survivor.wait(timeout=60)
        elapsed = time.monotonic() - killed
    finally:
        for proc in procs:
            proc.kill()
    assert code != 0
    assert elapsed < 30, f"process 0 took {elapsed:.1f} s to stop after its peer died"
