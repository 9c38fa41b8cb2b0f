"""Logit parity with transformers' Llama 4 text model (torch, float32), both directions.

Tiny random models (4 layers: dense and expert blocks alternating, 4-token chunked attention
with interleaved-pair RoPE and L2 qk-norm on three layers, a global NoPE layer with attention
temperature on the fourth, top-1 sigmoid routing that scales the expert input plus a shared
expert) are saved by one side and run by the other, on sequences three chunks long. A second
case has experts in every block, no qk-norm and Llama 3 RoPE scaling.
"""

from __future__ import annotations

import dataclasses

import pytest

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
from jaxtrain.interop.hf import load_hf_params, model_from_params, save_hf_checkpoint  # noqa: E402
from jaxtrain.interop.hf_config import hf_config_from_spec, spec_from_hf_config  # noqa: E402
from jaxtrain.models.presets.registry import model_spec  # noqa: E402

VOCAB, SEQ = 96, 12
_TINY = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=16,
    intermediate_size_mlp=40,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    num_local_experts=4,
    num_experts_per_tok=1,
    attention_chunk_size=4,
    no_rope_layer_interval=4,
    floor_scale=3,  # temperatures above 1 within a dozen tokens
    attn_scale=0.5,
    tie_word_embeddings=False,
)
HF_CASES = {
    "maverick-like": dict(_TINY, interleave_moe_layer_step=2, use_qk_norm=True),
    "scout-like": dict(
        _TINY,
        interleave_moe_layer_step=1,
        use_qk_norm=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    ),
}
SPEC = model_spec(
    "llama4-debug",
    vocab_size=VOCAB,
    num_layers=4,
    global_layer_step=4,
    attention_chunk=4,
    attn_floor_scale=3.0,
    init_std=0.2,
)


def _random_hf_model(kwargs: dict):
    return random_hf_model(transformers.Llama4TextConfig(**kwargs))


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_to_jaxtrain_logits(case, tmp_path):
    hf_model = _random_hf_model(HF_CASES[case])
    hf_model.save_pretrained(tmp_path)

    spec, params = load_hf_params(tmp_path)
    assert (spec.family, spec.attention_chunk, spec.global_layer_step) == ("llama4", 4, 4)
    assert spec.nope_global and spec.attn_temperature_tuning
    assert spec.moe_layer_step == (2 if case == "maverick-like" else 1)
    tokens_BL = tokens(VOCAB, SEQ)
    for impl in ("blockwise", "dot"):
        spec_impl = dataclasses.replace(spec, attention_impl=impl, attention_block=3)
        assert_logits_match(
            model_from_params(spec_impl, params)(tokens_BL), hf_model, tokens_BL, impl
        )


def test_jaxtrain_to_hf_logits(tmp_path):
    params = random_params(SPEC)
    hf_model = exported_hf_model(SPEC, params, tmp_path, "Llama4ForCausalLM")
    tokens_BL = tokens(VOCAB, SEQ)
    assert_logits_match(model_from_params(SPEC, params)(tokens_BL), hf_model, tokens_BL)
    assert spec_from_hf_config(tmp_path) == SPEC


def test_expert_layout_that_differs_from_the_config_is_named(tmp_path):
    save_hf_checkpoint(SPEC, random_params(SPEC), tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"\[4\] expert\(s\) in layers \[1, 3\].*layers "
        r"\[0, 1, 2, 3\]",
    ):
        load_hf_params(tmp_path, dataclasses.replace(SPEC, moe_layer_step=1))


def test_llama4_configs_that_cannot_be_expressed_are_rejected():
    with pytest.raises(ConfigError, match="model.nope_global=False cannot be written"):
        hf_config_from_spec(
            dataclasses.replace(SPEC, nope_global=False, attn_temperature_tuning=False)
        )
    with pytest.raises(ConfigError, match="model.moe_layer_step=2 has no place"):
        hf_config_from_spec(dataclasses.replace(model_spec("mixtral-debug"), moe_layer_step=2))
    cfg = hf_config_from_spec(SPEC)
    with pytest.raises(ConfigError, match="moe_layers="):
        spec_from_hf_config({**cfg, "moe_layers": [0, 3]})
    with pytest.raises(ConfigError, match="no_rope_layers="):
        spec_from_hf_config({**cfg, "no_rope_layers": [1, 0, 0, 1]})
