"""FP8 runs end to end: delayed-scaling histories through checkpoints, init_from and export,
and the debug models trained in fp8 ending where bfloat16 ends."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from checkpoint_fixtures import small_config
from data_fixtures import write_raw_shard

from jaxtrain.checkpoint.manager import CheckpointError
from jaxtrain.commands.export import export_hf
from jaxtrain.trainer import Trainer

FP8 = {"model.quantization": "fp8", "model.dtype": "bfloat16"}


def _trainer(run_dir: Path, config: str = "llama_debug.py", **overrides) -> Trainer:
    return Trainer(
        small_config(run_dir, config, **overrides), devices=jax.devices()[:1], console=False
    )


def _amax(trainer: Trainer) -> np.ndarray:
    return np.asarray(
        jax.device_get(trainer.state["params"]["layers"]["mlp"]["down_proj"]["fp8_amax"])
    )


@pytest.mark.slow
def test_amax_histories_round_trip_a_checkpoint_and_feed_the_next_step(tmp_path):
    trainer = _trainer(tmp_path / "run", **FP8)
    trainer.run(2)
    saved = _amax(trainer)
    trainer.close()
    assert saved.shape == (2, 3, 1024) and np.all(saved[:, :, :2] > 0)
    assert np.all(saved[:, :, 2:] == 0)

    resumed = _trainer(tmp_path / "run", **FP8)
    assert resumed.step == 2
    np.testing.assert_array_equal(_amax(resumed), saved)
    resumed.run(1)
    after = _amax(resumed)
    resumed.close()
    np.testing.assert_array_equal(after[:, :, 1:3], saved[:, :, :2])  # shifted by one step
    assert np.all(after[:, :, 0] > 0)

    # Resuming with fp8 off: the histories are what differs, and the message says so.
    with pytest.raises(CheckpointError, match=r"Only fp8 amax histories differ"):
        _trainer(tmp_path / "run")


@pytest.mark.slow
def test_an_fp8_run_starts_from_bfloat16_weights_and_exports_weights_only(tmp_path, capsys):
    source = _trainer(tmp_path / "source", **{"model.dtype": "bfloat16"})
    source.run(2)
    weights = jax.device_get(source.state["params"]["layers"]["mlp"]["down_proj"]["kernel"])
    source.close()

    capsys.readouterr()
    fp8_run = _trainer(
        tmp_path / "fp8", **FP8, **{"checkpoint.init_from": str(tmp_path / "source")}
    )
    out = capsys.readouterr().out
    assert "(139,584 params)" in out and "model.quantization: source '', run uses 'fp8'" in out
    assert fp8_run.num_params == 139_584  # amax histories are state, not parameters
    np.testing.assert_array_equal(
        fp8_run.state["params"]["layers"]["mlp"]["down_proj"]["kernel"], weights
    )
    assert not np.any(_amax(fp8_run))  # a new run's amax history starts empty
    fp8_run.run(2)
    fp8_run.close()
    hf = export_hf(tmp_path / "fp8", tmp_path / "hf")
    assert (hf / "model.safetensors").is_file()


def _learnable_shards(folder: Path, vocab: int = 512) -> Path:
    """Documents from a fixed random permutation of the vocabulary (each token followed by its
    image 90% of the time, by a random token otherwise): a model learns it in tens of steps,
    unlike uniform synthetic tokens, whose loss stays at ln(vocab) in any precision."""
    rng = np.random.default_rng(0)
    successor = rng.permutation(vocab)
    docs = []
    for _ in range(400):
        tokens = [int(rng.integers(vocab))]
        for _ in range(299):
            tokens.append(
                int(successor[tokens[-1]]) if rng.random() < 0.9 else int(rng.integers(vocab))
            )
        docs.append(tokens)
    write_raw_shard(folder, "000.ds", docs)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("config", ["llama_debug.py", "mixtral_debug.py", "nemotron_h_debug.py"])
def test_sixty_fp8_steps_end_within_two_percent_of_bfloat16(tmp_path, config):
    data = _learnable_shards(tmp_path / "data")
    final = {}
    for quantization in ("", "fp8"):
        trainer = _trainer(
            tmp_path / (quantization or "bf16"),
            config,
            **{
                "model.dtype": "bfloat16",
                "model.quantization": quantization,
                "train.steps": 60,
                "train.seq_len": 128,
                "data.kind": "datatrove",
                "data.paths": str(data),
                "optim.lr": 3e-3,
                "optim.warmup_steps": 10,
                "checkpoint.every": 0,
            },
        )
        trainer.run()
        losses = [h["loss"] for h in trainer.history]
        trainer.close()
        assert losses[-1] < 0.5 * losses[0]  # it learned: 6.2 -> about 2.1
        final[quantization] = np.mean(losses[-5:])
    assert abs(final["fp8"] - final[""]) / final[""] < 0.02
