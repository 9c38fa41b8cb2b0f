"""Which checkpoint a run starts from, and that no start ever overwrites a checkpoint."""

from __future__ import annotations

from pathlib import Path

import jax
import pytest
from checkpoint_fixtures import saved_steps, small_config
from conftest import REPO

from jaxtrain.checkpoint.manager import Checkpointer, CheckpointError
from jaxtrain.checkpoint.resume import start_step
from jaxtrain.cli import main
from jaxtrain.config.loader import validate
from jaxtrain.errors import ConfigError
from jaxtrain.trainer import Trainer

FOLDER = Path("/runs/a/checkpoints")


def test_the_latest_step_or_a_fresh_start():
    assert start_step(FOLDER, [4, 2, 6], resume=True) == 6
    assert start_step(FOLDER, [], resume=True) is None
    assert start_step(FOLDER, [], resume=False) is None
    assert start_step(FOLDER, [2, 4], resume=True, resume_step=4) == 4


def test_starting_over_onto_checkpoints_is_refused_with_the_ways_forward():
    with pytest.raises(CheckpointError) as error:
        start_step(FOLDER, [2, 4], resume=False)
    assert str(error.value) == (
        "checkpoint.resume=false asks to start over, but /runs/a/checkpoints already holds "
        "checkpoints of this run (steps 2, 4), which a new run would overwrite. To resume from "
        "step 4, run with checkpoint.resume=true (the default); to start over, point "
        "checkpoint.dir (or run.dir) at another folder, or move the old one away: mv "
        "/runs/a/checkpoints /runs/a/checkpoints.old"
    )


def test_a_named_step_must_exist_and_be_the_latest():
    with pytest.raises(
        CheckpointError,
        match=r"resume_step=3: /runs/a/checkpoints holds no "
        r"complete checkpoint of step 3 \(its complete "
        r"steps are 2, 4\)",
    ):
        start_step(FOLDER, [2, 4], resume=True, resume_step=3)
    with pytest.raises(CheckpointError, match=r"\(it holds none\)"):
        start_step(FOLDER, [], resume=True, resume_step=3)
    with pytest.raises(
        CheckpointError,
        match=r"resume_step=2: /runs/a/checkpoints also holds "
        r"later checkpoints \(steps 4, 6\), which "
        r"training on from step 2 would overwrite",
    ):
        start_step(FOLDER, [2, 4, 6], resume=True, resume_step=2)


def test_resume_step_with_resume_false_is_a_contradiction(tmp_path):
    cfg = small_config(tmp_path, **{"checkpoint.resume": False, "checkpoint.resume_step": 4})
    with pytest.raises(
        ConfigError,
        match="checkpoint.resume_step=4 asks to resume from that step, but checkpoint.resume=false",
    ):
        validate(cfg)


@pytest.fixture
def run_with_checkpoints(tmp_path) -> Path:
    """A run directory holding the checkpoints of steps 2 and 4."""
    run_dir = tmp_path / "run"
    trainer = Trainer(small_config(run_dir), devices=jax.devices()[:1], console=False)
    trainer.run(4)
    trainer.close()
    assert saved_steps(run_dir) == [2, 4]
    return run_dir


def test_a_fresh_start_on_existing_checkpoints_exits_2_and_changes_nothing(
    run_with_checkpoints, capsys
):
    run_dir = run_with_checkpoints
    before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()}
    args = [
        "--config",
        str(REPO / "configs" / "llama_debug.py"),
        f"--config.run.dir={run_dir}",
        "--config.train.steps=16",
        "--config.train.seq_len=32",
        "--config.train.global_batch_size=8",
        "--config.train.log_every=1",
        "--config.train.eval_every=0",
        "--config.train.progress=false",
        "--config.checkpoint.every=2",
        "--config.optim.warmup_steps=2",
        "--config.checkpoint.resume=false",
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "jaxtrain train: error: checkpoint.resume=false asks to start over, "
        f"but {run_dir / 'checkpoints'} already holds checkpoints of this "
        "run (steps 2, 4)"
    )
    assert len(err.strip().splitlines()) == 1 and "StepAlreadyExists" not in err
    after = {
        p: p.stat().st_mtime_ns
        for p in run_dir.rglob("*")
        if p.is_file() and p.name != ".jaxtrain.lock"
    }
    assert after == {p: t for p, t in before.items() if p.name != ".jaxtrain.lock"}


def test_resume_step_picks_the_checkpoint(run_with_checkpoints):
    run_dir = run_with_checkpoints
    with pytest.raises(CheckpointError, match="also holds later checkpoints"):
        Trainer(
            small_config(run_dir, **{"checkpoint.resume_step": 2}),
            devices=jax.devices()[:1],
            console=False,
        )
    (run_dir / "checkpoints" / "4").rename(run_dir / "step4.moved")
    trainer = Trainer(
        small_config(run_dir, **{"checkpoint.resume_step": 2}),
        devices=jax.devices()[:1],
        console=False,
    )
    try:
        assert trainer.step == 2
    finally:
        trainer.close()


def test_a_checkpoint_is_never_overwritten(tmp_path):
    checkpointer = Checkpointer(tmp_path / "ckpt")
    state = {"w": jax.numpy.ones(3)}
    checkpointer.save(5, state, {}, {})
    checkpointer.wait()
    with pytest.raises(
        CheckpointError,
        match=r"checkpoint step 5 already exists in .*ckpt, "
        r"and a checkpoint is never overwritten",
    ):
        checkpointer.save(5, state, {}, {})
    checkpointer.close()
