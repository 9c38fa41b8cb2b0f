"""MaxText's olmo3 and gpt3 blocks resolve as MaxText builds them: the gpt3 model files (the
MLPerf GPT-3 175B reference among them) to the sizes their names give, OLMo 3's to the
published counts with MaxText's one rotary table for every block; a shrunk copy of the MLPerf
file trains with nothing unsupported."""

import math

import jax
import pytest
from conftest import COMPAT_SAMPLES

from jaxtrain import compat
from jaxtrain.models.presets.registry import model_spec
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.trainer import Trainer

CONFIGS = COMPAT_SAMPLES / "maxtext/src/maxtext/configs"


def _spec(name: str) -> tuple[ModelSpec, object]:
    cfg, report = compat.load_foreign(
        CONFIGS / "base.yml",
        env={},
        native_overrides=[f"model_name={name}"],
        allow_unsupported=True,
    )
    return ModelSpec.from_config(cfg.model), report


@pytest.mark.parametrize(
    "name, rounded, unit",
    [("gpt3-175b", 175, 1e9), ("gpt3-22b", 22, 1e9), ("gpt3-6b", 6, 1e9), ("gpt3-52k", 52, 1e3)],
)
def test_maxtext_gpt3_files_count_what_their_names_say(name, rounded, unit):
    spec, report = _spec(name)
    assert (spec.family, spec.norm_type, spec.mlp_activation) == ("gpt3", "layer", "gelu")
    assert spec.qkv_bias and spec.o_bias and spec.mlp_bias and spec.tie_embeddings
    assert round(spec.num_params() / unit) == rounded
    # The model, the optimizer (Pax's Adam) and the eval keys all map: only the TFDS data
    # source of base.yml stays unsupported.
    assert [e.key for e in report.by_status("unsupported")] == ["dataset_type"]


def test_the_mlperf_gpt3_file_is_the_papers_175b_with_maxtexts_padding():
    spec, _ = _spec("gpt3-175b")
    # MaxText pads the vocabulary (50304) and learns 16384 positions; the paper has 50257, 2048.
    expected = model_spec("gpt3-175b", vocab_size=50304, learned_positions=16384)
    assert spec.num_params() == expected.num_params()
    assert spec.num_params() == pytest.approx(model_spec("gpt3-175b").num_params(), rel=2e-3)


@pytest.mark.parametrize("name", ["olmo3-7b", "olmo3-32b"])
def test_maxtext_olmo3_files_resolve_as_maxtext_builds_them(name):
    spec, report = _spec(name)
    published = model_spec(name)
    assert spec.num_params() == published.num_params()
    assert (spec.pre_norms, spec.post_norms, spec.qk_norm_across_heads) == (False, True, True)
    assert (spec.sliding_window, spec.global_layer_step) == (4096, 4)
    # MaxText rotates its sliding blocks by the YaRN table too (transformers does not).
    assert (spec.rope_scaling, spec.rope_factor, spec.rope_local_theta) == ("yarn", 8.0, 0.0)
    assert any("rotates its sliding blocks by the scaled" in note for note in report.notes)


def test_a_shrunk_mlperf_gpt3_trains(tmp_path):
    shrink = [
        "base_emb_dim=64",
        "base_num_query_heads=4",
        "base_num_kv_heads=4",
        "base_mlp_dim=128",
        "base_num_decoder_layers=2",
        "head_dim=16",
        "vocab_size=256",
        "trainable_position_size=64",
        "max_target_length=32",
        "per_device_batch_size=8",
        "steps=3",
        "dataset_type=synthetic",
        "enable_checkpointing=false",
    ]
    cfg, report = compat.load_foreign(
        CONFIGS / "models/gpt3-175b.yml",
        {"run.dir": str(tmp_path / "run"), "train.progress": False},
        env={},
        native_overrides=shrink,
    )
    assert report.by_status("unsupported") == []
    assert (cfg.model.family, cfg.model.learned_positions, cfg.model.hidden_size) == (
        "gpt3",
        64,
        64,
    )
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    try:
        trainer.run()
    finally:
        trainer.close()
    assert trainer.step == 3 and all(math.isfinite(h["loss"]) for h in trainer.history)
