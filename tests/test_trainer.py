"""End to end: train on shards written by datatrove, checkpoint, rerun and resume; bad input."""

import json
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import REPO

from jaxtrain.checkpoint.manager import CheckpointError
from jaxtrain.commands.bench import synthetic_batch
from jaxtrain.config import loader as config_lib
from jaxtrain.data.errors import DataError
from jaxtrain.rundir.metrics import read_jsonl
from jaxtrain.trainer import Trainer, TrainingError


def debug_config(tmp_path, corpus, **overrides):
    base = {
        "run.dir": str(tmp_path / "run"),
        "data.kind": "datatrove",
        "data.paths": str(corpus.folder),
        "data.val_paths": str(corpus.folder),
        "data.tokenizer": str(corpus.tokenizer),
        "train.seq_len": 32,
        "train.global_batch_size": 16,
        "train.micro_batch_size": 8,
        "train.steps": 6,
        "train.log_every": 1,
        "train.eval_every": 3,
        "train.eval_batches": 2,
        "train.progress": False,
        "checkpoint.every": 3,
        "optim.lr": 3e-3,
        "optim.warmup_steps": 2,
    }
    base.update(overrides)
    return config_lib.load_config(str(REPO / "configs" / "llama_debug.py"), base)


def run(cfg, steps=None, devices=None):
    trainer = Trainer(cfg, devices=devices, console=False)
    try:
        trainer.run(steps)
        return trainer.step, [h["loss"] for h in trainer.history]
    finally:
        trainer.close()


def test_train_checkpoint_and_resume_match_an_uninterrupted_run(tmp_path, datatrove_corpus):
    # Uninterrupted: 6 steps on 8 devices (fsdp=8), two micro batches per step.
    cfg = debug_config(tmp_path / "a", datatrove_corpus)
    step, straight = run(cfg)
    assert step == 6
    records = read_jsonl(tmp_path / "a" / "run" / "metrics.jsonl")
    assert [r["step"] for r in records if "loss" in r] == list(range(1, 7))
    assert any("val_loss" in r for r in records)
    assert straight[-1] < straight[0]

    # Interrupted after 3 steps, then the same command again continues at step 3.
    cfg = debug_config(tmp_path / "b", datatrove_corpus)
    step, first = run(cfg, steps=3)
    assert step == 3
    resumed = Trainer(debug_config(tmp_path / "b", datatrove_corpus), console=False)
    try:
        assert resumed.step == 3
        resumed.run()
        second = [h["loss"] for h in resumed.history]
    finally:
        resumed.close()
    np.testing.assert_allclose(first + second, straight, rtol=1e-6)
    steps_on_disk = sorted(
        int(p.name) for p in (tmp_path / "b/run/checkpoints").iterdir() if p.name.isdigit()
    )
    assert steps_on_disk == [3, 6]


def test_loss_chunks_from_the_config_train_and_validate_like_the_plain_path(
    tmp_path, datatrove_corpus
):
    """`train.loss_chunks` reaches both compiled functions: the same losses, the logits
    computed four chunks at a time."""
    figures, traced = {}, {}
    for chunks in (0, 4):
        cfg = debug_config(
            tmp_path / str(chunks),
            datatrove_corpus,
            **{"train.loss_chunks": chunks, "train.steps": 3, "checkpoint.every": 0},
        )
        trainer = Trainer(cfg, console=False)
        try:
            trainer.run()
            assert trainer.step == 3
            batch = trainer.setup.global_batch(synthetic_batch(cfg, trainer.spec.vocab_size))
            with trainer.setup.mesh_context():
                traced[chunks] = [
                    trainer.lowered_step.as_text(debug_info=True),
                    trainer.setup.eval_step.lower(trainer.state["params"], batch).as_text(
                        debug_info=True
                    ),
                ]
            losses = [h["loss"] for h in trainer.history]
        finally:
            trainer.close()
        records = read_jsonl(tmp_path / str(chunks) / "run" / "metrics.jsonl")
        figures[chunks] = losses + [r["val_loss"] for r in records if "val_loss" in r]
    assert len(figures[4]) == 4  # three steps and one validation
    np.testing.assert_allclose(figures[4], figures[0], rtol=2e-5)
    # Both the train and the eval step took the chunked path, and only with chunks set.
    for with_chunks, without in zip(traced[4], traced[0]):
        assert "chunked_loss.py" in with_chunks and "chunked_loss.py" not in without


def test_checkpoint_of_another_model_is_refused(tmp_path, datatrove_corpus):
    devices = jax.devices()[:1]
    run(
        debug_config(tmp_path, datatrove_corpus, **{"train.steps": 1, "optim.warmup_steps": 0}),
        devices=devices,
    )
    other = debug_config(
        tmp_path, datatrove_corpus, **{"train.steps": 2, "model.intermediate_size": 96}
    )
    with pytest.raises(
        CheckpointError,
        match=r"mlp.up_proj.kernel: checkpoint .*128.* vs "
        r"model .*96",
    ):
        Trainer(other, devices=devices, console=False)


def test_non_finite_loss_stops_with_a_clear_error(tmp_path, datatrove_corpus):
    cfg = debug_config(
        tmp_path,
        datatrove_corpus,
        **{
            "optim.lr": 1e30,
            "optim.min_lr": 0.0,
            "optim.clip_grad_norm": 0.0,
            "train.steps": 6,
            "checkpoint.every": 0,
            "train.eval_every": 0,
        },
    )
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    with pytest.raises(TrainingError, match="(loss|grad_norm) is (nan|inf)"):
        trainer.run()
    trainer.close()


def test_token_ids_beyond_the_vocabulary_are_refused(tmp_path, datatrove_corpus):
    cfg = debug_config(tmp_path, datatrove_corpus, **{"model.vocab_size": 128})
    with pytest.raises(DataError, match="128"):
        Trainer(cfg, devices=jax.devices()[:1], console=False)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "jaxtrain", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_reports_unknown_keys_in_one_line():
    result = _cli("--config", "configs/llama_debug.py", "--config.train.stepz=3")
    assert result.returncode == 2
    assert "config key 'train.stepz' does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_config_prints_resolved_json():
    result = _cli("config", "configs/llama2_7b.py", "--json", "--config.train.steps=7")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["config"]["train"]["steps"] == 7
    assert payload["derived"]["num_params"] == 6_738_415_616


def test_validation_between_checkpoints_sees_that_steps_parameters(tmp_path, datatrove_corpus):
    # Steps are read one step late; validation at a step that is neither checkpointed nor the
    # last must still run on that step's parameters, not on those of the step dispatched after it.
    def val_loss_at_2(folder, steps):
        cfg = debug_config(
            folder, datatrove_corpus, **{"train.steps": steps, "train.eval_every": 2}
        )
        cfg.checkpoint.every = 0
        run(cfg)
        records = read_jsonl(folder / "run" / "metrics.jsonl")
        return next(r["val_loss"] for r in records if r["step"] == 2 and "val_loss" in r)

    ends_at_2 = val_loss_at_2(tmp_path / "a", 2)
    goes_on = val_loss_at_2(tmp_path / "b", 3)
    assert goes_on == ends_at_2
