"""Checkpoints in an S3 bucket (moto's server on 127.0.0.1) keep the promise of local ones: a
run killed with SIGKILL after a checkpoint resumes from the bucket and ends with the losses of an
uninterrupted local run, bit for bit; `checkpoints --verify` and `export` read the bucket."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import boto3
import pytest
import test_checkpointing
from checkpoint_fixtures import STEPS, losses
from conftest import REPO
from test_checkpointing import cli_command, wait_for_step

from jaxtrain.rundir.step_folders import committed_steps

straight_losses = test_checkpointing.straight_losses  # the uninterrupted local run


@pytest.mark.slow
def test_sigkill_then_resume_from_a_bucket_matches_a_local_run(
    tmp_path, s3_server, straight_losses
):
    boto3.client("s3").create_bucket(Bucket="jaxtrain-e2e")
    url = "s3://jaxtrain-e2e/ckpt"
    run_dir = tmp_path / "run"
    command = cli_command(run_dir, **{"checkpoint.dir": url})
    with open(tmp_path / "killed.log", "w") as out:
        proc = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for_step(proc, run_dir, 3)  # past the first checkpoint (step 2) ...
            deadline = time.monotonic() + 60
            while 2 not in committed_steps(url):  # ... once it is committed
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert max(losses(run_dir)) < STEPS, "the run ended before it could be killed"

    with open(tmp_path / "resumed.log", "w") as out:
        result = subprocess.run(
            command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, timeout=300
        )
    log = (tmp_path / "resumed.log").read_text()
    assert result.returncode == 0, log
    assert f"in {url}" in log and "resumed from step " in log
    assert losses(run_dir) == straight_losses

    verify = subprocess.run(
        [sys.executable, "-m", "jaxtrain", "checkpoints", str(run_dir), "--verify"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"{url}: " in verify.stdout and "checksums match" in verify.stdout
    exported = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxtrain",
            "export",
            "--run",
            str(run_dir),
            "--to",
            "hf",
            str(tmp_path / "hf"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert (tmp_path / "hf" / "model.safetensors").is_file()


@pytest.mark.slow  # three CLI runs of the debug model (about a minute)
def test_shards_and_checkpoints_in_a_bucket_resume_after_sigkill_like_a_local_run(
    tmp_path, s3_server, datatrove_corpus
):
    """Everything but the run directory in the bucket: the shards are read by range and the
    checkpoints written there; a SIGKILL after a checkpoint and a rerun give the losses of one
    uninterrupted run over the same shards in a local folder."""
    client = boto3.client("s3")
    client.create_bucket(Bucket="jaxtrain-all")
    for f in sorted(datatrove_corpus.folder.iterdir()):
        if f.is_file():
            client.upload_file(str(f), "jaxtrain-all", f"shards/{f.name}")
    data = {
        "data.kind": "datatrove",
        "data.tokenizer": str(datatrove_corpus.tokenizer),
        "data.paths": "s3://jaxtrain-all/shards",
    }
    url = "s3://jaxtrain-all/ckpt"
    local_data = {**data, "data.paths": str(datatrove_corpus.folder)}
    straight = subprocess.run(
        cli_command(tmp_path / "straight", **local_data),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert straight.returncode == 0, straight.stdout + straight.stderr
    assert sorted(losses(tmp_path / "straight")) == list(range(1, STEPS + 1))

    run_dir = tmp_path / "run"
    command = cli_command(run_dir, **data, **{"checkpoint.dir": url})
    with open(tmp_path / "killed.log", "w") as out:
        proc = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for_step(proc, run_dir, 3)
            deadline = time.monotonic() + 60
            while 2 not in committed_steps(url):
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert max(losses(run_dir)) < STEPS, "the run ended before it could be killed"

    resumed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resumed from step " in resumed.stdout + resumed.stderr
    assert losses(run_dir) == losses(tmp_path / "straight")
