"""Logit parity with transformers' DeepSeek V2 and V3 (torch, float32), both directions.

Tiny random models (3 layers: one dense then two with experts, 8 experts in 4 groups, top-2,
one shared expert, latent attention, YaRN) are saved by one side and run by the other. The V2
cases cover a plain query projection (V2-Lite) and a compressed one with group-limited routing;
the V3 cases sigmoid routing over "noaux_tc" groups with a nonzero expert bias, with interleaved
and half-split rotary pairs.
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

VOCAB, SEQ = 96, 12
_YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 32,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
}
_TINY = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=48,
    moe_intermediate_size=16,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    n_routed_experts=8,
    num_experts_per_tok=2,
    n_shared_experts=1,
    first_k_dense_replace=1,
    kv_lora_rank=16,
    qk_nope_head_dim=8,
    qk_rope_head_dim=8,
    v_head_dim=12,
    tie_word_embeddings=False,
)
HF_CASES = {
    "v2-lite": (
        "DeepseekV2Config",
        dict(
            _TINY,
            q_lora_rank=None,
            topk_method="greedy",
            routed_scaling_factor=1.0,
            rope_parameters={**_YARN, "mscale": 0.707, "mscale_all_dim": 0.707},
        ),
    ),
    "v2": (
        "DeepseekV2Config",
        dict(
            _TINY,
            q_lora_rank=24,
            topk_method="group_limited_greedy",
            n_group=4,
            topk_group=2,
            routed_scaling_factor=2.0,
            rope_parameters={**_YARN, "mscale": 1.0, "mscale_all_dim": 0.5},
        ),
    ),
    "v3": (
        "DeepseekV3Config",
        dict(
            _TINY,
            q_lora_rank=24,
            n_group=4,
            topk_group=2,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            rope_interleave=True,
            rope_parameters={**_YARN, "mscale": 1.0, "mscale_all_dim": 1.0},
        ),
    ),
    # Half-split rotary pairs; mscale alone, so cos and sin carry YaRN's attention factor.
    "v3-half-split": (
        "DeepseekV3Config",
        dict(
            _TINY,
            q_lora_rank=None,
            n_group=2,
            topk_group=1,
            norm_topk_prob=False,
            routed_scaling_factor=1.5,
            rope_interleave=False,
            rope_parameters={**_YARN, "mscale": 1.0},
        ),
    ),
}
_DEBUG = dict(init_std=0.2, vocab_size=VOCAB, num_layers=3)
SPEC_CASES = {
    "v2-lite": model_spec(
        "deepseek-v2-debug",
        q_lora_rank=0,
        moe_topk_method="greedy",
        moe_n_group=1,
        moe_topk_group=1,
        **_DEBUG,
    ),
    "v2": model_spec("deepseek-v2-debug", **_DEBUG),
    "v3": model_spec("deepseek-v3-debug", moe_bias_update_rate=0.0, **_DEBUG),
}


def _random_hf_model(config_cls: str, kwargs: dict):
    # The expert score bias large enough to change which experts win.
    return random_hf_model(
        getattr(transformers, config_cls)(**kwargs), buffer_std={"e_score_correction_bias": 0.3}
    )


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_to_jaxtrain_logits(case, tmp_path):
    hf_model = _random_hf_model(*HF_CASES[case])
    hf_model.save_pretrained(tmp_path)

    spec, params = load_hf_params(tmp_path)
    assert (spec.mla, spec.num_dense_layers, spec.num_experts) == (True, 1, 8)
    if case.startswith("v3"):
        assert float(np.abs(params["layers"]["mlp"]["score_bias"]).max()) > 0.1
    tokens_BL = tokens(VOCAB, SEQ)
    assert_logits_match(model_from_params(spec, params)(tokens_BL), hf_model, tokens_BL)


@pytest.mark.parametrize("case", sorted(SPEC_CASES))
def test_jaxtrain_to_hf_logits(case, tmp_path):
    spec = SPEC_CASES[case]
    params = random_params(spec)
    hf_model = exported_hf_model(
        spec,
        params,
        tmp_path,
        {"deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM"}[
            spec.family
        ],
    )
    tokens_BL = tokens(VOCAB, SEQ)
    assert_logits_match(model_from_params(spec, params)(tokens_BL), hf_model, tokens_BL)
    # The written config reads back as the same spec.
    assert spec_from_hf_config(tmp_path) == spec


def test_expert_layout_that_differs_from_the_config_is_named(tmp_path):
    spec = SPEC_CASES["v3"]
    save_hf_checkpoint(spec, random_params(spec), tmp_path)
    with pytest.raises(ConfigError, match=r"\[8\] expert\(s\) per layer in layers 1..2.*says 16"):
        load_hf_params(tmp_path, dataclasses.replace(spec, num_experts=16))
    with pytest.raises(ConfigError, match="first_k_dense_replace=0"):
        load_hf_params(tmp_path, dataclasses.replace(spec, num_dense_layers=0))


def test_deepseek_configs_that_cannot_be_expressed_are_rejected():
    v2 = SPEC_CASES["v2"]
    with pytest.raises(ConfigError, match="model.moe_norm_topk"):
        hf_config_from_spec(dataclasses.replace(v2, moe_norm_topk=True))
    with pytest.raises(ConfigError, match="model.moe_shared_experts=1 has no place"):
        hf_config_from_spec(
            dataclasses.replace(model_spec("qwen3-moe-debug"), moe_shared_experts=1)
        )
    cfg = hf_config_from_spec(v2)
    with pytest.raises(ConfigError, match="moe_layer_freq=2"):
        spec_from_hf_config({**cfg, "moe_layer_freq": 2})
    with pytest.raises(ConfigError, match="topk_method='noaux_tc'"):
        spec_from_hf_config({**cfg, "topk_method": "noaux_tc"})
