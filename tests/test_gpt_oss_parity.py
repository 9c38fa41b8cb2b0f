"""Logit parity with transformers' gpt-oss (torch, float32), both directions.

Tiny random models (4 layers alternating a 5-token sliding window and full attention, sinks,
biased q/k/v/o, 4 experts top-2 with router and expert biases and the clamped SwiGLU, YaRN
with an unrounded ramp) are saved by one side and run by the other, on sequences longer than
the window. Weights are drawn large enough that the clamp and the sinks matter.
"""

from __future__ import annotations

import dataclasses

import numpy as np
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

VOCAB, SEQ = 96, 14
_TINY = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=24,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    num_local_experts=4,
    num_experts_per_tok=2,
    sliding_window=5,
    tie_word_embeddings=False,
    swiglu_limit=1.5,  # low enough that the clamp cuts activations of these weights
    rope_parameters={
        "rope_type": "yarn",
        "rope_theta": 150000.0,
        "factor": 4.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
        "original_max_position_embeddings": 64,
    },
)
HF_CASES = {
    "alternating": _TINY,
    # Full attention on every fourth layer only, and the default (truncated) YaRN ramp.
    "every-fourth-full": dict(
        _TINY,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
        rope_parameters={**_TINY["rope_parameters"], "truncate": True},
    ),
}
SPEC = model_spec(
    "gpt-oss-debug",
    vocab_size=VOCAB,
    num_layers=4,
    sliding_window=5,
    init_std=0.2,
    moe_swiglu_limit=2.0,
)


def _random_hf_model(kwargs: dict):
    # Sinks comparable to the scores, so the sink takes a share.
    return random_hf_model(transformers.GptOssConfig(**kwargs), param_std={"sinks": 2.0})


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_to_jaxtrain_logits(case, tmp_path):
    hf_model = _random_hf_model(HF_CASES[case])
    hf_model.save_pretrained(tmp_path)

    spec, params = load_hf_params(tmp_path)
    assert (spec.family, spec.sliding_window, spec.attention_sinks) == ("gpt_oss", 5, True)
    assert spec.global_layer_step == (2 if case == "alternating" else 4)
    assert spec.rope_truncate == (case != "alternating")
    tokens_BL = tokens(VOCAB, SEQ)
    for impl in ("blockwise", "dot"):
        spec_impl = dataclasses.replace(spec, attention_impl=impl, attention_block=4)
        assert_logits_match(
            model_from_params(spec_impl, params)(tokens_BL), hf_model, tokens_BL, impl
        )


def test_jaxtrain_to_hf_logits(tmp_path):
    params = random_params(SPEC)
    hf_model = exported_hf_model(SPEC, params, tmp_path, "GptOssForCausalLM")
    tokens_BL = tokens(VOCAB, SEQ)
    assert_logits_match(model_from_params(SPEC, params)(tokens_BL), hf_model, tokens_BL)
    assert spec_from_hf_config(tmp_path) == SPEC
    # And back: the saved tensors load as the parameters they came from.
    _, loaded = load_hf_params(tmp_path)
    np.testing.assert_array_equal(
        loaded["layers"]["mlp"]["up_bias"], params["layers"]["mlp"]["up_bias"]
    )


def test_expert_layout_that_differs_from_the_config_is_named(tmp_path):
    save_hf_checkpoint(SPEC, random_params(SPEC), tmp_path)
    with pytest.raises(ConfigError, match=r"\[4\] expert\(s\) in layers \[0, 1, 2, 3\].*says 8"):
        load_hf_params(tmp_path, dataclasses.replace(SPEC, num_experts=8))


def test_quantized_and_per_expert_checkpoints_are_named():
    from jaxtrain.interop.hf_layout import check_expert_layout

    with pytest.raises(ConfigError, match="MXFP4"):
        check_expert_layout("x", ["model.layers.0.mlp.experts.gate_up_proj_blocks"], SPEC)
    with pytest.raises(ConfigError, match="one tensor per expert"):
        check_expert_layout("x", ["model.layers.0.mlp.experts.0.gate_proj.weight"], SPEC)


def test_gpt_oss_specs_that_cannot_be_expressed_are_rejected():
    with pytest.raises(ConfigError, match="model.attention_sinks=False cannot be written"):
        hf_config_from_spec(dataclasses.replace(SPEC, attention_sinks=False))
    with pytest.raises(ConfigError, match="model.o_bias=False"):
        hf_config_from_spec(dataclasses.replace(SPEC, o_bias=False))
    with pytest.raises(ConfigError, match="model.attention_sinks=True has no place"):
        hf_config_from_spec(model_spec("llama-debug", attention_sinks=True))
    cfg = hf_config_from_spec(SPEC)
    types = ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    with pytest.raises(ConfigError, match="layer_types="):
        spec_from_hf_config({**cfg, "layer_types": types})
