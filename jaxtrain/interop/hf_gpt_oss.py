"""gpt-oss `config.json` keys <-> the `ModelSpec` fields of attention sinks, alternating
sliding / full attention, biased attention and experts, and the clamped SwiGLU.

transformers' `GptOssForCausalLM` always has sinks, a router bias and expert biases; its
`attention_bias` puts biases on q, k, v and o alike; its experts' hidden size is
`intermediate_size` (there is no dense MLP), and `layer_types` names each layer sliding or
full, which the spec expresses as every `global_layer_step`-th layer full.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_layout import require_settings
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.models.spec.layer_pattern import is_global_layer


def global_step(types: list[str], global_type: str, where: str, key: str = "layer_types") -> int:
    """The `global_layer_step` whose pattern (every step-th layer global) gives `types`:
    0 when no layer is global; ConfigError naming `key` for any other pattern."""
    flags = [t == global_type for t in types]
    if not any(flags):
        return 0
    step = flags.index(True) + 1
    if step == 1 or any(f != ((i + 1) % step == 0) for i, f in enumerate(flags)):
        raise ConfigError(
            f"{where}: {key}={types} is not supported; jaxtrain makes every "
            "n-th layer global (n >= 2) and the others local."
        )
    return step


def gpt_oss_fields(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The spec fields of a gpt-oss config (after the common ones are read)."""
    layers = int(cfg["num_hidden_layers"])
    types = list(
        cfg.get("layer_types")
        or ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
    )
    step = global_step(types, "full_attention", where)
    window = int(cfg.get("sliding_window") or 0)
    if all(t == "full_attention" for t in types):
        window, step = 0, 0
    k = int(cfg.get("num_experts_per_tok", 4))
    bias = bool(cfg.get("attention_bias", True))
    return dict(
        sliding_window=window,
        global_layer_step=step,
        attention_sinks=True,
        qkv_bias=bias,
        o_bias=bias,
        num_experts=int(cfg.get("num_local_experts", 128)),
        num_experts_per_tok=k,
        moe_intermediate_size=int(cfg["intermediate_size"]),
        moe_score="topk_softmax",
        moe_norm_topk=True,
        moe_router_bias=True,
        moe_expert_bias=True,
        moe_activation="clamped_swiglu",
        moe_swiglu_alpha=float(cfg.get("swiglu_alpha", 1.702)),
        moe_swiglu_limit=float(cfg.get("swiglu_limit", 7.0)),
        # transformers' balancing loss counts tokens, jaxtrain's assignments (k x smaller).
        moe_aux_loss_coef=float(cfg.get("router_aux_loss_coef", 0.0)) * k,
    )


def check_gpt_oss_expressible(spec: ModelSpec, arch: str) -> None:
    """ConfigError when a gpt-oss spec has something `GptOssForCausalLM` lacks."""
    needs = {
        "attention_sinks": (spec.attention_sinks, "True"),
        "o_bias": (spec.o_bias == spec.qkv_bias, f"model.qkv_bias={spec.qkv_bias}"),
        "num_experts": (spec.num_experts > 0, "> 0"),
        "moe_score": (spec.moe_score == "topk_softmax", "'topk_softmax'"),
        "moe_router_bias": (spec.moe_router_bias, "True"),
        "moe_expert_bias": (spec.moe_expert_bias, "True"),
        "moe_activation": (spec.moe_activation == "clamped_swiglu", "'clamped_swiglu'"),
        "intermediate_size": (
            spec.intermediate_size == spec.moe_intermediate_size,
            f"model.moe_intermediate_size={spec.moe_intermediate_size}",
        ),
    }
    absent = (
        "qk_norm",
        "qk_l2_norm",
        "attention_chunk",
        "nope_global",
        "rope_interleave",
        "moe_shared_experts",
        "num_dense_layers",
        "moe_score_bias",
        "moe_weight_inputs",
    )
    for key in absent:
        needs[key] = (not getattr(spec, key), "off")
    needs["moe_layer_step"] = (spec.moe_layer_step == 1, "1")
    needs["moe_routed_scaling"] = (spec.moe_routed_scaling == 1.0, "1.0")
    needs["moe_topk_method"] = (spec.moe_topk_method == "greedy", "'greedy'")
    require_settings(spec, arch, needs)


def gpt_oss_config(spec: ModelSpec) -> dict[str, Any]:
    """The transformers keys of a gpt-oss spec (the common ones are written apart)."""
    local = "sliding_attention" if spec.sliding_window else "full_attention"
    k = spec.num_experts_per_tok
    return dict(
        intermediate_size=spec.moe_intermediate_size,
        attention_bias=spec.qkv_bias,
        sliding_window=spec.sliding_window or None,
        layer_types=[
            "full_attention" if is_global_layer(spec, i) else local for i in range(spec.num_layers)
        ],
        num_local_experts=spec.num_experts,
        num_experts_per_tok=k,
        swiglu_alpha=spec.moe_swiglu_alpha,
        swiglu_limit=spec.moe_swiglu_limit,
        router_aux_loss_coef=spec.moe_aux_loss_coef / k,
        output_router_logits=False,
    )
