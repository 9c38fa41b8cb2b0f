"""Multi-process training on one machine: 2 processes x 4 CPU devices over 127.0.0.1 (gloo).

The two processes train through the real CLI (`--coordinator/--num-processes/--process-id`) and
must log the same losses as one process with 8 devices; only process 0 writes the run's
config.json and metrics; the checkpoint is written jointly. Start-up and failure paths: an
unreachable coordinator is a clear error within the timeout, and a process that dies mid-run
brings the others down within the heartbeat timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from multiprocess_helpers import Job, child_env, free_port

from jaxtrain.cli import main
from jaxtrain.parallel import distributed
from jaxtrain.rundir.metrics import read_jsonl

WORKER = str(Path(__file__).resolve().parent / "multiprocess_worker.py")


def train_args(run_dir: Path, checkpoint_dir: Path) -> list[str]:
    """CLI arguments of a 4-step debug run on synthetic tokens, logging every step."""
    return [
        "--config",
        str(REPO / "configs" / "llama_debug.py"),
        f"--config.run.dir={run_dir}",
        f"--config.checkpoint.dir={checkpoint_dir}",
        "--config.train.steps=4",
        "--config.train.log_every=1",
        "--config.train.seq_len=32",
        "--config.train.progress=false",
        "--config.train.eval_batches=0",
        "--config.optim.lr=1e-2",
        "--config.optim.warmup_steps=1",
    ]


@pytest.mark.slow  # about a minute on two cores: three jax processes compile at once
def test_two_processes_train_exactly_like_one(tmp_path):
    port = free_port()
    procs = []
    for pid in range(2):
        args = train_args(tmp_path / f"run{pid}", tmp_path / "ckpt")
        args += [
            "--coordinator",
            f"127.0.0.1:{port}",
            "--num-processes",
            "2",
            "--process-id",
            str(pid),
        ]
        log = open(tmp_path / f"log{pid}", "w")
        procs.append(
            subprocess.Popen(
                [sys.executable, WORKER, "train", str(tmp_path / f"out{pid}.json"), "--", *args],
                env=child_env(4),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        )
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
        assert out["mesh"] == dict(data=2, pipeline=1, fsdp=4, context=1, expert=1, tensor=1)
        assert out["owners_by_data_row"] == [[0] * 4, [1] * 4]


@pytest.mark.slow  # about a minute on two cores, like the test above
def test_pipeline_stages_in_two_processes_train_like_one_process(tmp_path):
    """dcn_pipeline=2: each process holds one stage (half the blocks, 4 fsdp shards each) and
    the activations cross between processes; the losses are one process's without a pipeline."""
    port = free_port()
    stages = [
        "--config.model.num_layers=4",
        "--config.mesh.dcn_pipeline=2",
        "--config.mesh.dcn_data=1",
        "--config.mesh.ici_fsdp=4",
    ]
    procs = []
    for pid in range(2):
        args = train_args(tmp_path / f"run{pid}", tmp_path / "ckpt") + stages
        args += [
            "--coordinator",
            f"127.0.0.1:{port}",
            "--num-processes",
            "2",
            "--process-id",
            str(pid),
        ]
        log = open(tmp_path / f"log{pid}", "w")
        procs.append(
            subprocess.Popen(
                [sys.executable, WORKER, "train", str(tmp_path / f"out{pid}.json"), "--", *args],
                env=child_env(4),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        )
    try:
        reference_args = train_args(tmp_path / "ref", tmp_path / "ref_ckpt")
        assert main(["train", *reference_args, "--config.model.num_layers=4"]) == 0
        for proc in procs:
            proc.wait(timeout=300)
    finally:
        for proc in procs:
            proc.kill()
    logs = [(tmp_path / f"log{pid}").read_text()[-3000:] for pid in range(2)]
    assert [p.returncode for p in procs] == [0, 0], logs
    for pid in range(2):
        out = json.loads((tmp_path / f"out{pid}.json").read_text())
        assert out["mesh"] == dict(data=1, pipeline=2, fsdp=4, context=1, expert=1, tensor=1)
        # Mesh rows are data (one row), the next axis the stages: stage i is process i.
        assert out["owners_by_data_row"] == [[0] * 4 + [1] * 4]
    reference = [r["loss"] for r in read_jsonl(tmp_path / "ref" / "metrics.jsonl") if "loss" in r]
    pair = [r["loss"] for r in read_jsonl(tmp_path / "run0" / "metrics.jsonl") if "loss" in r]
    assert len(reference) == 4
    np.testing.assert_allclose(pair, reference, rtol=1e-4)


def test_unreachable_coordinator_is_a_clear_error_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(
        distributed.DistributedError,
        match=r"process 1 of 2 could not reach the coordinator at "
        r"127\.0\.0\.1:\d+ within 2 s",
    ):
        distributed.initialize_from_env(
            2, coordinator=f"127.0.0.1:{free_port()}", num_processes=2, process_id=1
        )
    assert time.monotonic() - start < 10


def long_run_args(root: Path) -> list[str]:
    """A debug run long enough to be killed in the middle, checkpointing every 20 steps."""
    return [
        "--config",
        str(REPO / "configs" / "llama_debug.py"),
        f"--config.run.dir={root}",
        "--config.train.steps=100000",
        "--config.train.log_every=1",
        "--config.train.seq_len=32",
        "--config.train.global_batch_size=4",
        "--config.train.progress=false",
        "--config.train.eval_batches=0",
        "--config.checkpoint.every=20",
    ]


def kill_and_time_the_survivor(tmp_path: Path, victim: int, **env: str) -> tuple[Job, float]:
    """Kills process `victim` once a checkpoint exists; returns the job and how long the
    other process took to exit after that."""
    run_dir = tmp_path / "run"
    job = Job(long_run_args(run_dir), tmp_path / "logs", env=env)
    deadline = time.monotonic() + 240
    while not (run_dir / "checkpoints" / "20").is_dir():
        assert time.monotonic() < deadline and all(p.poll() is None for p in job.procs), job.log(
            0
        ) + job.log(1)
        time.sleep(0.1)
    job.procs[victim].kill()
    killed = time.monotonic()
    survivor = job.procs[1 - victim]
    try:
        survivor.wait(timeout=90)
    finally:
        job.kill()
    return job, time.monotonic() - killed


@pytest.mark.slow  # a two-process run, then the default 30 s watch
def test_a_killed_process_is_named_by_the_others_within_a_minute(tmp_path):
    job, elapsed = kill_and_time_the_survivor(tmp_path, victim=1)
    log = job.log(0)
    assert job.procs[0].returncode == 3, log
    assert elapsed < 60, f"process 0 took {elapsed:.1f} s to stop after its peer died"
    last = log.strip().splitlines()[-1]
    assert last.startswith("jaxtrain train: error: lost process 1 of 2"), log
    assert "Run the same command on every host to resume from checkpoint step" in last
    assert str(tmp_path / "run" / "checkpoints") in last
    assert "Check failure stack trace" not in log


@pytest.mark.slow  # a two-process run
def test_losing_the_coordinator_ends_the_others_with_one_line(tmp_path):
    job, elapsed = kill_and_time_the_survivor(tmp_path, victim=0)
    log = job.log(1)
    assert job.procs[1].returncode == 3, log
    assert elapsed < 60
    last = log.strip().splitlines()[-1]
    assert last.startswith("jaxtrain train: error: lost the coordinator at 127.0.0.1:"), log
    assert "(process 0 of 2)" in last and "to resume from checkpoint step" in last
    # JAX's own native report of the same loss is kept out (parallel/native_log_filter.py).
    for native in ("Check failure stack trace", "Terminating process", "Polled an error"):
        assert native not in log, log


def test_an_error_in_one_process_stops_the_others_at_once(tmp_path):
    """A process that fails tells its peers, which stop instead of waiting in a collective."""
    port = free_port()
    procs = []
    for pid in range(2):
        env = child_env(
            2,
            JAXTRAIN_COORDINATOR=f"127.0.0.1:{port}",
            JAXTRAIN_NUM_PROCESSES="2",
            JAXTRAIN_PROCESS_ID=str(pid),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, WORKER, "spin", "fail" if pid else ""],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=REPO,
            )
        )
    try:
        outputs = [p.communicate(timeout=60)[0] for p in procs]
    finally:
        for proc in procs:
            proc.kill()
    assert procs[1].returncode == 2, outputs[1]
    assert procs[0].returncode == 3, outputs[0]
    assert "jaxtrain train: error: process 1 of 2 stopped with an error" in outputs[0]
