"""What the loop guarantees around the step: no checkpoint from a non-finite step, and logged
step times that are wall time between completed steps."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from conftest import REPO

from jaxtrain.checkpoint.manager import Checkpointer
from jaxtrain.config import loader as config_lib
from jaxtrain.rundir.metrics import read_jsonl
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


def test_step_timer_counts_one_loop_cycle_per_step_and_restarts_after_host_work():
    now = [0.0]
    timer = StepTimer(clock=lambda: now[0])

    def at(t, event, step_no):
        now[0] = t
        getattr(timer, event)(step_no)

    timer.started()
    at(0.0, "dispatched", 1)
    at(0.1, "dispatched", 2)
    at(10.0, "completed", 1)  # a run's first step: not counted, and neither is its logging
    at(10.5, "dispatched", 3)  # the window opens with step 3 queued
    at(11.0, "completed", 2)  # dispatched before the window opened: not counted
    at(11.1, "dispatched", 4)
    at(12.0, "completed", 3)
    at(12.1, "dispatched", 5)
    at(13.0, "completed", 4)
    assert timer.take() == (2, 2.5)

    timer.interrupted()  # an evaluation while step 5 runs: it finishes meanwhile
    at(30.0, "dispatched", 6)
    at(30.1, "completed", 5)  # read at once, long after the step ended: not a step time
    at(30.5, "dispatched", 7)
    at(31.5, "completed", 6)
    at(31.6, "completed", 7)  # read right after its own dispatch (before a save): not counted
    assert timer.take() == (1, 1.5)
    timer.interrupted()  # the checkpoint copy
    assert timer.take() is None

    at(40.0, "dispatched", 8)
    at(40.3, "dispatched", 9)
    at(41.0, "completed", 8)
    at(41.3, "dispatched", 10)
    at(42.0, "completed", 9)
    assert timer.take() == (2, 2.0)


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
    timed = {r["step"]: r for r in records if "tokens_per_s" in r}
    # Steps evaluated (2, 4, ...) or checkpointed (3, 6, ...) are read right after their own
    # dispatch, so that they are evaluated and saved on their own parameters, and so is the last
    # (16): such a step lacks the next step's loading and is not a step time. The steps read one
    # step late in between (5, 7, 11, 13) are. Once counted, host work made the steps after it
    # look 50x faster.
    assert sorted(timed) == [5, 7, 11, 13]
    for r in timed.values():
        assert 0 < r["mfu"] <= 1 and math.isclose(
            r["tokens_per_s"] * r["step_time"], 8 * 32, rel_tol=1e-6
        )


def test_a_step_the_host_came_late_for_opens_the_next_window_when_the_next_was_queued():
    """Step 3 was done before the host asked for it (a paused host thread): step 4, queued at
    11.0, may have run since then, so its window starts there, not at the read of step 3."""
    now = [0.0]
    timer = StepTimer(clock=lambda: now[0])

    def at(t, event, *args):
        now[0] = t
        getattr(timer, event)(*args)

    timer.interrupted()
    at(10.0, "dispatched", 3)
    at(11.0, "dispatched", 4)
    at(12.0, "completed", 3, False)  # ready before the read: the host came late
    assert timer.take() == (1, 2.0)
    at(12.1, "dispatched", 5)
    at(12.2, "completed", 4, True)  # the host waited: step 5 starts now
    # From the read of step 3 the window would be 0.2 s: a step 5x faster than the device.
    assert timer.take() == (1, pytest.approx(1.2))
    at(12.3, "dispatched", 6)
    at(13.2, "completed", 5, True)
    assert timer.take() == (1, pytest.approx(1.0))
