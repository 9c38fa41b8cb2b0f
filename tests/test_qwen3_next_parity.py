"""Qwen3-Next and Qwen3.5 (dense and MoE): logit parity with transformers'
`Qwen3NextForCausalLM`, `Qwen3_5ForCausalLM` and `Qwen3_5MoeForCausalLM` (torch, float32) both
ways, the presets' parameter counts against transformers', and config keys that cannot work
named in one line.

Hugging Face -> jaxtrain: a tiny random transformers model saved with `save_pretrained`, read
with `load_hf_params`. jaxtrain -> Hugging Face: the same spec with fresh random weights, written
with `save_hf_checkpoint`, loaded by `AutoModelForCausalLM` and read back to the same spec. The
tiny models alternate Gated DeltaNet and gated attention layers with a quarter of each head
rotated; Qwen3-Next's has one dense layer among its expert layers (`mlp_only_layers`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import safetensors.numpy

torch = pytest.importorskip(
    "torch",
    reason="torch (CPU) is the transformers reference; "
    "install the `test` extra to run parity tests.",
)
transformers = pytest.importorskip("transformers")

from parity_helpers import (  # noqa: E402
    assert_logits_match,
    exported_hf_model,
    random_hf_model,
    random_params,
    tokens,
)

from jaxtrain.errors import ConfigError  # noqa: E402
from jaxtrain.interop import hf_config  # noqa: E402
from jaxtrain.interop.hf import load_hf_params, model_from_params  # noqa: E402
from jaxtrain.interop.hf_qwen3_next import QWEN3_NEXT_FAMILIES as FAMILIES  # noqa: E402
from jaxtrain.models.presets.registry import PRESETS, PUBLISHED_PARAMS, model_spec  # noqa: E402

VOCAB, SEQ = 96, 20
# float32 rounding through the gated delta rule's recurrence: on a 2-core Intel Xeon (AMX) the
# same jaxtrain logits moved by 5e-5 between XLA's optimisation levels (the tests compile at
# level 0), and differed from transformers' by 1.2e-4 at level 0 and 6.9e-5 at the default.
TOLERANCE = 2e-4
_TINY = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=48,
    max_position_embeddings=128,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    full_attention_interval=2,
)
_EXPERTS = dict(
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
    shared_expert_intermediate_size=24,
)
# architecture -> (config class, its extra keys, the block pattern it reads as)
_CASES = {
    "Qwen3NextForCausalLM": ("Qwen3NextConfig", dict(_EXPERTS, mlp_only_layers=[2]), "GE*EG-*E"),
    "Qwen3_5ForCausalLM": ("Qwen3_5TextConfig", {}, "G-*-G-*-"),
    "Qwen3_5MoeForCausalLM": ("Qwen3_5MoeTextConfig", _EXPERTS, "GE*EGE*E"),
}


def _config(arch: str, **changes):
    name, extra, _ = _CASES[arch]
    return getattr(transformers, name)(**{**_TINY, **extra, **changes})


def _add_mtp_tensor(path) -> None:
    """A multi-token-prediction tensor beside the decoder's, as the published checkpoints have
    (transformers skips them; so does jaxtrain)."""
    tensors = safetensors.numpy.load_file(path)
    tensors["mtp.fc.weight"] = np.zeros((4, 4), np.float32)
    safetensors.numpy.save_file(tensors, path, metadata={"format": "pt"})


@pytest.mark.parametrize("arch", sorted(_CASES))
def test_hf_to_jaxtrain_logits(arch, tmp_path):
    # Weights at 0.15 keep the logits above 1 while float32 rounding in the delta rule's
    # chunks stays well inside the tolerance.
    hf_model = random_hf_model(_config(arch), std=0.15)
    assert type(hf_model).__name__ == arch
    hf_model.save_pretrained(tmp_path)
    _add_mtp_tensor(tmp_path / "model.safetensors")
    spec, params = load_hf_params(tmp_path)
    assert spec.block_pattern == _CASES[arch][2]
    assert (spec.rope_dim, spec.attn_output_gate, spec.norm_zero_centered) == (4, True, True)
    tokens_BL = tokens(VOCAB, SEQ)
    ours_BLV = model_from_params(spec, params)(tokens_BL)
    assert_logits_match(ours_BLV, hf_model, tokens_BL, arch, tolerance=TOLERANCE)


@pytest.mark.parametrize("arch", sorted(_CASES))
def test_jaxtrain_to_hf_logits(arch, tmp_path):
    spec = hf_config.spec_from_hf_config(_config(arch).to_dict(), init_std=0.15)
    params = random_params(spec)
    hf_model = exported_hf_model(spec, params, tmp_path, arch)
    tokens_BL = tokens(VOCAB, SEQ)
    ours_BLV = model_from_params(spec, params)(tokens_BL)
    assert_logits_match(ours_BLV, hf_model, tokens_BL, arch, tolerance=TOLERANCE)
    assert load_hf_params(tmp_path)[0] == spec


def test_unknown_layer_type_is_named():
    cfg = _config("Qwen3_5ForCausalLM").to_dict()
    cfg["layer_types"] = ["linear_attention", "sliding_attention"] * 2
    with pytest.raises(ConfigError, match="layer_types entry 'sliding_attention'"):
        hf_config.spec_from_hf_config(cfg)


def test_a_pattern_without_pairs_is_refused_on_export():
    spec = hf_config.spec_from_hf_config(_config("Qwen3_5ForCausalLM").to_dict())
    broken = dataclasses.replace(spec, block_pattern="GG*-G-*-")
    with pytest.raises(ConfigError, match="model.block_pattern='GG"):
        hf_config.hf_config_from_spec(broken)


# config.json values of the published checkpoints (the 3.5 ones their `text_config`), written
# out apart from the presets.
_PUBLISHED = {
    "qwen3-next-80b-a3b": (
        "Qwen3NextConfig",
        dict(
            vocab_size=151936,
            hidden_size=2048,
            num_hidden_layers=48,
            num_attention_heads=16,
            intermediate_size=5120,
            num_experts=512,
            num_experts_per_tok=10,
            moe_intermediate_size=512,
            shared_expert_intermediate_size=512,
            linear_num_value_heads=32,
        ),
    ),
    "qwen3.5-35b-a3b": (
        "Qwen3_5MoeTextConfig",
        dict(
            vocab_size=248320,
            hidden_size=2048,
            num_hidden_layers=40,
            num_attention_heads=16,
            num_experts=256,
            num_experts_per_tok=8,
            moe_intermediate_size=512,
            shared_expert_intermediate_size=512,
            linear_num_value_heads=32,
        ),
    ),
    "qwen3.5-397b-a17b": (
        "Qwen3_5MoeTextConfig",
        dict(
            vocab_size=248320,
            hidden_size=4096,
            num_hidden_layers=60,
            num_attention_heads=32,
            num_experts=512,
            num_experts_per_tok=10,
            moe_intermediate_size=1024,
            shared_expert_intermediate_size=1024,
            linear_num_value_heads=64,
        ),
    ),
}
_SHARED = dict(
    num_key_value_heads=2,
    head_dim=256,
    linear_num_key_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    tie_word_embeddings=False,
)


def _meta_count(config) -> int:
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("preset", sorted(_PUBLISHED))
def test_published_sizes_count_like_transformers(preset):
    name, sizes = _PUBLISHED[preset]
    count = _meta_count(getattr(transformers, name)(**_SHARED, **sizes))
    assert count == PUBLISHED_PARAMS[preset] == model_spec(preset).num_params()


@pytest.mark.parametrize("preset", [p for p in sorted(PRESETS) if PRESETS[p]["family"] in FAMILIES])
def test_every_preset_counts_like_its_exported_config(preset):
    # The config save_hf_checkpoint would write, built by transformers: the debug sizes too.
    spec = model_spec(preset)
    cfg = hf_config.hf_config_from_spec(spec)
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    assert _meta_count(config) == spec.num_params()


def test_active_counts_match_the_model_names():
    # The names round loosely: A3B is 3.9B (80B) and 3.5B (35B) with the embeddings counted.
    for name in ("qwen3-next-80b-a3b", "qwen3.5-35b-a3b"):
        assert 3e9 < model_spec(name).num_active_params() < 4e9, name
    assert round(model_spec("qwen3.5-397b-a17b").num_active_params() / 1e9) == 17
    assert round(PUBLISHED_PARAMS["qwen3-next-80b-a3b"] / 1e9) == 80
    assert round(PUBLISHED_PARAMS["qwen3.5-35b-a3b"] / 1e9) == 35


@pytest.mark.parametrize(
    "preset, change",
    [
        ("qwen3-debug", dict(partial_rotary_factor=0.5)),
        ("qwen3-moe-debug", dict(attn_output_gate=True)),
        ("nemotron-h-debug", dict(norm_zero_centered=True)),
    ],
)
def test_other_classes_refuse_the_qwen3_next_switches_by_name(preset, change):
    (key,) = change
    with pytest.raises(ConfigError, match=f"model.{key}="):
        hf_config.hf_config_from_spec(model_spec(preset, **change))
