"""Whether a spec fits the Hugging Face architecture of its family: the switches only some
classes have (`check_pattern_keys`, for every family) and the attention biases, qk-norm, experts
and windows of the Llama / Qwen / Mistral / Mixtral / Qwen3-MoE classes (`check_expressible`).
"""

from __future__ import annotations

from jaxtrain.errors import ConfigError
from jaxtrain.models.spec.hyperparameters import ModelSpec

QWEN = ("qwen2", "qwen3")
GEMMA = ("gemma", "gemma2", "gemma3")
# Families whose `attention_bias` puts biases on q, k, v and o (gpt-oss and Llama 4 read it in
# their own modules).
ATTENTION_BIAS = ("llama", "qwen3", "qwen3_moe", "olmo3")


def check_expressible(spec: ModelSpec, arch: str) -> None:
    """ConfigError when a Llama / Qwen / Mistral / Mixtral / Qwen3-MoE spec has a feature its
    HF architecture lacks."""
    family = spec.family
    deepseek_only = {
        "kv_lora_rank": spec.mla,
        "num_dense_layers": spec.num_dense_layers and family != "qwen3_moe",
        "moe_shared_experts": spec.moe_shared_experts,
        "moe_score_bias": spec.moe_score_bias,
        "moe_score": spec.moe_score == "sigmoid",
        "moe_topk_method": spec.moe_topk_method != "greedy",
        "moe_routed_scaling": spec.moe_routed_scaling != 1.0,
    }
    for key, used in deepseek_only.items():
        if used:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} has no place in {arch}; "
                "use family 'deepseek_v2' or 'deepseek_v3', or the default."
            )
    wants = {"qwen2": (True, False), "qwen3": (False, True), "qwen3_moe": (False, True)}.get(
        family, (False, False)
    )
    if family in ATTENTION_BIAS:  # attention_bias: q/k/v and o biases together
        wants = (spec.qkv_bias, wants[1])
        if spec.o_bias != spec.qkv_bias:
            raise ConfigError(
                f"model.o_bias={spec.o_bias} and model.qkv_bias={spec.qkv_bias} "
                f"differ, but {arch}'s attention_bias sets both; set them equal, or use "
                "family 'qwen2' for q/k/v biases alone."
            )
    if (spec.qkv_bias, spec.qk_norm) != wants:
        raise ConfigError(
            f"model.family={family!r} ({arch}) has qkv_bias={wants[0]}, qk_norm={wants[1]} but "
            f"the spec has qkv_bias={spec.qkv_bias}, qk_norm={spec.qk_norm}; use family "
            "'qwen2' for q/k/v biases alone, 'llama' or 'qwen3' for q/k/v and o biases "
            "(o_bias=True), 'qwen3' for qk-norm, 'llama' or 'mistral' for neither."
        )
    moe_family = family in ("mixtral", "qwen3_moe")
    if moe_family != bool(spec.num_experts):
        raise ConfigError(
            f"model.family={family!r} ({arch}) and model.num_experts="
            f"{spec.num_experts} disagree; use family 'mixtral' or 'qwen3_moe' "
            "exactly when num_experts > 0."
        )
    # Top-k then softmax equals softmax, top-k, renormalise: Mixtral's routing either way.
    if family == "mixtral" and (spec.moe_score, spec.moe_norm_topk) == ("softmax_topk", False):
        raise ConfigError(
            "model.family='mixtral' always renormalises its top-k weights; set "
            "model.moe_norm_topk=true or use family 'qwen3_moe'."
        )
    if spec.sliding_window and family == "llama":
        raise ConfigError(
            "model.family='llama' has no sliding window in transformers; use "
            "family 'mistral' (same weights plus a window)."
        )


def check_pattern_keys(spec: ModelSpec, arch: str) -> None:
    """ConfigError for a gpt-oss / Llama 4 feature on a family whose class lacks it."""
    owners = {
        "attention_sinks": "gpt_oss",
        "o_bias": ("gpt_oss", "llama4", *ATTENTION_BIAS),
        "mlp_bias": "llama",
        "global_layer_step": ("gpt_oss", "llama4", "olmo3", *GEMMA),
        "pre_norms": "olmo3",
        "qk_norm_across_heads": "olmo3",
        "norm_type": "gpt3",
        "learned_positions": "gpt3",
        "leading_global_layers": QWEN,
        "moe_router_bias": "gpt_oss",
        "moe_expert_bias": "gpt_oss",
        "moe_activation": "gpt_oss",
        "attention_chunk": "llama4",
        "nope_global": "llama4",
        "qk_l2_norm": "llama4",
        "attn_temperature_tuning": "llama4",
        "moe_weight_inputs": "llama4",
        "moe_layer_step": ("llama4", "qwen3_moe"),
        "rope_truncate": "gpt_oss",
        "rope_interleave": ("llama4", "deepseek_v2", "deepseek_v3"),
    }
    # Grok's switches: transformers has no Grok class, so no exported family may carry them
    # but Gemma, which shares some (hf_gemma checks which of its generations has which).
    owners.update(
        dict.fromkeys(("attn_temperature_len", "router_logit_softcap", "output_multiplier"), "grok")
    )
    owners["moe_residual_mlp"] = "grok"
    # Qwen3-Next's and Qwen3.5's switches: written by hf_qwen3_next, no other class has them.
    owners.update(
        dict.fromkeys(
            ("attn_output_gate", "partial_rotary_factor", "moe_shared_gate"),
            ("qwen3_next", "qwen3_5", "qwen3_5_moe"),
        )
    )
    owners["post_norms"] = ("grok", "olmo3", *GEMMA)
    owners["rope_local_theta"] = ("grok", "olmo3", *GEMMA)
    owners.update(
        dict.fromkeys(
            (
                "mlp_activation",
                "attn_logit_softcap",
                "final_logit_softcap",
                "embed_multiplier",
                "norm_zero_centered",
                "query_pre_attn_scalar",
            ),
            ("grok", *GEMMA),
        )
    )
    defaults = {
        "moe_activation": "swiglu",
        "moe_layer_step": 1,
        "rope_truncate": True,
        "mlp_activation": "swiglu",
        "embed_multiplier": 1.0,
        "output_multiplier": 1.0,
        "attn_logit_softcap": 0.0,
        "attn_temperature_len": 0,
        "router_logit_softcap": 0.0,
        "final_logit_softcap": 0.0,
        "query_pre_attn_scalar": 0.0,
        "rope_local_theta": 0.0,
        "pre_norms": True,
        "norm_type": "rms",
        "learned_positions": 0,
        "partial_rotary_factor": 1.0,
    }
    for key, families in owners.items():
        families = (families,) if isinstance(families, str) else families
        if getattr(spec, key) != defaults.get(key, False) and spec.family not in families:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} has no place in {arch}; "
                f"use family {' or '.join(map(repr, families))}, or the default."
            )
    if spec.moe_score == "topk_sigmoid" and spec.family != "llama4":
        raise ConfigError(
            f"model.moe_score='topk_sigmoid' has no place in {arch}; use family "
            "'llama4', or another moe_score."
        )
