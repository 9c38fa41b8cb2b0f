"""Logit parity with transformers' Mixtral and Qwen3-MoE (torch, float32), both directions.

Tiny random models (2 layers, 4 experts, top-2, hidden 32) are saved by one side and run by the
other; weights are drawn large enough that a swapped expert or projection shows in the logits.
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
from jaxtrain.interop.hf import load_hf_params, model_from_params  # noqa: E402
from jaxtrain.interop.hf_config import hf_config_from_spec, spec_from_hf_config  # noqa: E402
from jaxtrain.models import ModelSpec  # noqa: E402

VOCAB, SEQ = 96, 12
_TINY = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    num_experts_per_tok=2,
)
HF_CASES = {
    "mixtral": (
        "MixtralConfig",
        dict(_TINY, intermediate_size=48, num_local_experts=4, rope_theta=1000000.0),
    ),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        dict(
            _TINY,
            head_dim=16,
            intermediate_size=64,
            moe_intermediate_size=24,
            num_experts=4,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            rope_theta=1000000.0,
        ),
    ),
    "qwen3_moe-unnormalised": (
        "Qwen3MoeConfig",
        dict(
            _TINY,
            head_dim=8,
            intermediate_size=64,
            moe_intermediate_size=24,
            num_experts=4,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        ),
    ),
}
_SPEC = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    max_seq_len=128,
    norm_eps=1e-6,
    init_std=0.2,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
)
SPEC_CASES = {
    # Mixtral has one feed-forward size, the experts'.
    "mixtral": ModelSpec(
        family="mixtral", moe_score="topk_softmax", **{**_SPEC, "intermediate_size": 24}
    ),
    "qwen3_moe": ModelSpec(
        family="qwen3_moe", qk_norm=True, moe_score="softmax_topk", moe_norm_topk=False, **_SPEC
    ),
}


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_to_jaxtrain_logits(case, tmp_path):
    config_cls, kwargs = HF_CASES[case]
    hf_model = random_hf_model(getattr(transformers, config_cls)(**kwargs))
    hf_model.save_pretrained(tmp_path)

    spec, params = load_hf_params(tmp_path)
    assert (spec.num_experts, spec.num_experts_per_tok) == (4, 2)
    tokens_BL = tokens(VOCAB, SEQ)
    assert_logits_match(model_from_params(spec, params)(tokens_BL), hf_model, tokens_BL)


@pytest.mark.parametrize("case", sorted(SPEC_CASES))
def test_jaxtrain_tohf_logits(case, tmp_path):
    spec = SPEC_CASES[case]
    params = random_params(spec)
    hf_model = exported_hf_model(
        spec,
        params,
        tmp_path,
        {"mixtral": "MixtralForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}[spec.family],
    )
    tokens_BL = tokens(VOCAB, SEQ)
    assert_logits_match(model_from_params(spec, params)(tokens_BL), hf_model, tokens_BL)
    # The written config reads back as the same spec (run-choice fields aside).
    assert spec_from_hf_config(tmp_path) == spec


def test_layer_patterns_and_families_that_cannot_be_written_are_rejected():
    # Two layers: only the second can hold experts with a dense first one.
    cfg = hf_config_from_spec(SPEC_CASES["qwen3_moe"])
    with pytest.raises(ConfigError, match="mlp_only_layers=\\[1\\] put experts in layers"):
        spec_from_hf_config({**cfg, "mlp_only_layers": [1]})
    with pytest.raises(ConfigError, match="num_experts"):
        hf_config_from_spec(dataclasses.replace(SPEC_CASES["mixtral"], family="mistral"))
