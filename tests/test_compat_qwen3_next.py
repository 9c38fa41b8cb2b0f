"""Qwen3-Next and Qwen3.5 from other stacks' files: MaxText's qwen3-next-80b-a3b, qwen3.5-35b-a3b
and qwen3.5-397b-a17b model files and Primus' qwen3_5_35B_A3B (Megatron, BF16 and FP8)
resolve to the presets' totals and active counts with nothing refused; another experimental
Megatron attention is still refused by name; fp8 trains and a pipeline trains like one device."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import pytest
import training_helpers
from conftest import COMPAT_SAMPLES
from training_helpers import mesh_config

from jaxtrain import compat
from jaxtrain.errors import ConfigError
from jaxtrain.models.assembly import pipeline
from jaxtrain.models.assembly.pipeline import Schedule
from jaxtrain.models.presets.qwen3_next import layer_pattern
from jaxtrain.models.presets.registry import model_spec
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.parallel import sharding

MAXTEXT = COMPAT_SAMPLES / "maxtext/src/maxtext/configs/base.yml"
PRIMUS = str(COMPAT_SAMPLES / "Primus/examples/megatron/configs/{}.yaml")


def _counts(spec: ModelSpec) -> tuple[int, int]:
    return spec.num_params(), spec.num_active_params()


@pytest.mark.parametrize("name", ["qwen3-next-80b-a3b", "qwen3.5-35b-a3b", "qwen3.5-397b-a17b"])
def test_maxtext_files_resolve_to_the_published_counts(name):
    cfg, report = compat.load_foreign(
        MAXTEXT, env={}, native_overrides=[f"model_name={name}"], allow_unsupported=True
    )
    spec, published = ModelSpec.from_config(cfg.model), model_spec(name)
    assert (spec.family, spec.block_pattern) == (published.family, published.block_pattern)
    assert _counts(spec) == _counts(published)
    assert (spec.partial_rotary_factor, spec.attn_output_gate, spec.moe_shared_gate) == (
        0.25,
        True,
        True,
    )
    # Only base.yml's TFDS data source stays unsupported.
    assert [e.key for e in report.by_status("unsupported")] == ["dataset_type"]


@pytest.mark.parametrize(
    "name",
    [
        "MI300X/qwen3_5_35B_A3B-BF16-pretrain",
        "MI300X/qwen3_5_35B_A3B-FP8-pretrain",
        "MI355X/qwen3_5_35B_A3B-FP8-pretrain",
    ],
)
def test_primus_files_resolve_to_the_published_counts(name):
    cfg, report = compat.load_foreign(PRIMUS.format(name), env={})
    spec, published = ModelSpec.from_config(cfg.model), model_spec("qwen3.5-35b-a3b")
    assert (spec.family, spec.block_pattern) == ("qwen3_5_moe", published.block_pattern)
    assert _counts(spec) == _counts(published)
    assert (spec.norm_zero_centered, spec.moe_shared_gate, spec.partial_rotary_factor) == (
        True,
        True,
        0.25,
    )
    assert spec.quantization == ("fp8" if "FP8" in name else "")
    assert report.by_status("unsupported") == []
    assert any("len(tokenizer) of Qwen/Qwen3.5-35B-A3B is not known" in n for n in report.notes)


def test_another_experimental_attention_is_refused_by_name():
    with pytest.raises(ConfigError, match="experimental_attention_variant='dsa'"):
        compat.load_foreign(
            PRIMUS.format("MI300X/qwen3_5_35B_A3B-BF16-pretrain"),
            env={},
            native_overrides=["experimental_attention_variant=dsa"],
        )


def test_a_linear_attention_frequency_list_is_named():
    with pytest.raises(ConfigError, match=r"linear_attention_freq=\[1, 1, 1, 0\]"):
        compat.load_foreign(
            PRIMUS.format("MI300X/qwen3_5_35B_A3B-BF16-pretrain"),
            env={},
            native_overrides=["linear_attention_freq=[1,1,1,0]"],
        )


# Four checkpoint layers: two repeats of the (GDN, attention) period, so two pipeline stages.
_FOUR_LAYERS = dict(num_layers=8, block_pattern=layer_pattern(4, "E", 2), linear_chunk=4)


def _losses(spec: ModelSpec, sizes: dict[str, int]) -> list[float]:
    devices = jax.devices()[: int(np.prod(list(sizes.values()) or [1]))]
    with pipeline.use(Schedule()):
        return training_helpers.train(spec, sharding.make_mesh(mesh_config(**sizes), devices), 2)[0]


def test_a_pipeline_trains_like_one_device():
    spec = model_spec("qwen3-next-debug", **_FOUR_LAYERS)
    got = _losses(spec, dict(ici_pipeline=2, ici_fsdp=2))
    np.testing.assert_allclose(got, _losses(spec, {}), rtol=1e-4)


def test_fp8_trains():
    spec = dataclasses.replace(model_spec("qwen3-next-debug"), quantization="fp8")
    losses = _losses(spec, {})
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0]
