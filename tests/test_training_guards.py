"""What the loop guarantees around the step: no checkpoint from a non-finite step, and logged
step times that are wall time between completed steps."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from conftest import REPO

from jaxtrain import config as config_lib
from jaxtrain.checkpoint import Checkpointer
from jaxtrain.metrics import read_jsonl
from jaxtrain.train.step_timer import StepTimer
from jaxtrain.trainer import Trainer, TrainingError


def synthetic_config(tmp_path, **overrides):
    values = {
        "run.dir": str(tmp_path / "run"),
        "train.seq_len": 32,
        "train.global_batch_size": 8,
        "train.steps": 12,
        "train.log_every": 1,
        "train.eval_batches": 0,
        "train.progress": False,
        "optim.warmup_steps": 1,
    }
    values.update(overrides)
    return config_lib.load_config(str(REPO / "configs" / "llama_debug.py"), values)


def all_finite(tree) -> bool:
    return all(
        bool(np.isfinite(np.asarray(leaf)).all()) for leaf in jax.tree_util.tree_leaves(tree)
    )


@pytest.mark.parametrize("every", [1, 4])
def test_a_diverging_run_keeps_only_finite_checkpoints_and_names_the_last(tmp_path, every):
    cfg = synthetic_config(
        tmp_path,
        **{
            "optim.lr": 1e3,
            "optim.clip_grad_norm": 0.0,
            "checkpoint.every": every,
            "checkpoint.keep": 3,
        },
    )
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    with pytest.raises(TrainingError, match=r"(loss|grad_norm) is (nan|inf)") as error:
        trainer.run()
    trainer.close()
    diverged = int(str(error.value).split(" at step ")[1].split(";")[0])
    reader = Checkpointer(trainer.checkpointer.directory, read_only=True)
    steps = reader.all_steps()
    assert steps, "the run diverged before its first checkpoint: raise the learning rate"
    assert max(steps) < diverged
    for step in steps:  # every checkpoint left on disk holds finite values only
        state, _, _ = reader.restore(step, trainer.layout.abstract)
        assert all_finite(state), f"checkpoint {step} holds non-finite values"
    assert f"The last checkpoint, step {max(steps)} in {reader.directory}, is finite" in str(
        error.value
    )


def test_a_non_finite_gradient_norm_stops_even_with_a_finite_loss(tmp_path):
    trainer = Trainer(
        synthetic_config(tmp_path, **{"train.steps": 1}), devices=jax.devices()[:1], console=False
    )
    try:
        with pytest.raises(
            TrainingError,
            match=r"grad_norm is inf at step 7; stopping "
            r"without saving this state\. No checkpoint",
        ):
            trainer._check_finite(7, {"loss": np.float32(2.5), "grad_norm": np.float32(np.inf)})
    finally:
        trainer.close()


def test_step_timer_restarts_after_host_work():
    now = [0.0]
    timer = StepTimer(clock=lambda: now[0])
    timer.interrupted()  # compiling
    for t in (10.0, 11.0, 12.0):
        now[0] = t
        timer.completed()
    assert timer.take() == (2, 2.0)  # the first completion opens the window
    timer.interrupted()  # an evaluation: the device may finish the next step meanwhile
    now[0] = 30.0
    timer.completed()  # read at once, long after the step ended: not a step time
    assert timer.take() is None
    now[0] = 31.5
    timer.completed()
    assert timer.take() == (1, 1.5)


def test_logged_throughput_is_plausible_around_evaluations_and_saves(tmp_path, datatrove_corpus):
    cfg = synthetic_config(
        tmp_path,
        **{
            "data.kind": "datatrove",
            "data.paths": str(datatrove_corpus.folder),
            "data.val_paths": str(datatrove_corpus.folder),
            "train.eval_every": 2,
            "train.eval_batches": 2,
            "checkpoint.every": 3,
            "train.steps": 16,
        },
    )
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    try:
        trainer.run()
    finally:
        trainer.close()
    records = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "loss" in r]
    first = records[0]
    assert first["step"] == 1 and first["compile_s"] > 0 and "tokens_per_s" not in first
    timed = [r for r in records if "tokens_per_s" in r]
    assert len(timed) >= 4
    median = float(np.median([r["tokens_per_s"] for r in timed]))
    for r in timed:
        # Host work (evaluation, checkpoint copies) once made steps after it look 50x faster.
        assert r["tokens_per_s"] < 4 * median, (r["step"], r["tokens_per_s"], median)
        assert 0 < r["mfu"] <= 1 and math.isclose(
            r["tokens_per_s"] * r["step_time"], 8 * 32, rel_tol=1e-6
        )
