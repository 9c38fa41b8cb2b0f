"""Llama 4 text (`Llama4ForCausalLM`, model_type llama4_text) `config.json` keys <-> the
`ModelSpec` fields of chunked attention, NoPE layers, attention temperature, L2 qk-norm,
interleaved dense / expert blocks and top-1 sigmoid routing with a shared expert.

transformers names the experts' hidden size `intermediate_size` and the dense blocks'
`intermediate_size_mlp`; `no_rope_layers` marks RoPE layers 1 and NoPE layers 0, the NoPE ones
attend globally and the others in `attention_chunk_size` chunks; `moe_layers` lists the expert
blocks (every `interleave_moe_layer_step`-th). Its rotary pairs are interleaved (2i, 2i + 1).
The multimodal `Llama4ForConditionalGeneration` checkpoints (vision tower, `language_model.`
prefix) are not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_gpt_oss import global_step
from jaxtrain.interop.hf_layout import require_settings
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.models.spec.layer_pattern import is_global_layer, moe_layer_indices


def llama4_fields(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The spec fields of a Llama 4 text config (after the common ones are read)."""
    layers = int(cfg["num_hidden_layers"])
    interval = int(cfg.get("no_rope_layer_interval", 4))
    rope_layers = list(
        cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
    )
    step = global_step(
        ["nope" if not r else "rope" for r in rope_layers], "nope", where, "no_rope_layers"
    )
    chunk = int(cfg.get("attention_chunk_size") or 0)
    moe_step = int(cfg.get("interleave_moe_layer_step", 1))
    expected_moe = list(range(moe_step - 1, layers, moe_step))
    if cfg.get("moe_layers") is not None and list(cfg["moe_layers"]) != expected_moe:
        raise ConfigError(
            f"{where}: moe_layers={cfg['moe_layers']} is not every "
            f"interleave_moe_layer_step={moe_step}-th layer ({expected_moe}); "
            "jaxtrain interleaves experts at a fixed step."
        )
    types = cfg.get("layer_types")
    local = "chunked_attention" if chunk else "full_attention"
    wanted = [
        ("full_attention" if (step and (i + 1) % step == 0) else local) for i in range(layers)
    ]
    if types is not None and list(types) != wanted:
        raise ConfigError(
            f"{where}: layer_types={types} disagrees with no_rope_layers and "
            f"attention_chunk_size (expected {wanted})."
        )
    k = int(cfg.get("num_experts_per_tok", 1))
    bias = bool(cfg.get("attention_bias", False))
    return dict(
        intermediate_size=int(cfg.get("intermediate_size_mlp") or cfg["intermediate_size"]),
        moe_intermediate_size=int(cfg["intermediate_size"]),
        rope_interleave=True,
        attention_chunk=chunk,
        global_layer_step=step,
        nope_global=bool(step),
        qk_l2_norm=bool(cfg.get("use_qk_norm", True)),
        attn_temperature_tuning=bool(cfg.get("attn_temperature_tuning", True)) and bool(step),
        attn_floor_scale=float(cfg.get("floor_scale", 8192)),
        attn_scale=float(cfg.get("attn_scale", 0.1)),
        qkv_bias=bias,
        o_bias=bias,
        num_experts=int(cfg.get("num_local_experts", 16)),
        num_experts_per_tok=k,
        moe_score="topk_sigmoid",
        moe_weight_inputs=True,
        moe_shared_experts=1,
        moe_layer_step=moe_step,
        moe_aux_loss_coef=float(cfg.get("router_aux_loss_coef", 0.0)) * k,
    )


def check_llama4_expressible(spec: ModelSpec, arch: str) -> None:
    """ConfigError when a Llama 4 spec has something `Llama4ForCausalLM` lacks."""
    needs = {
        "num_experts": (spec.num_experts > 0, "> 0"),
        "moe_score": (spec.moe_score == "topk_sigmoid", "'topk_sigmoid'"),
        "moe_weight_inputs": (spec.moe_weight_inputs, "True"),
        "moe_shared_experts": (spec.moe_shared_experts == 1, "1"),
        "rope_interleave": (spec.rope_interleave, "True"),
        # transformers' global layers are exactly its NoPE ones.
        "nope_global": (
            spec.nope_global == bool(spec.global_layer_step),
            str(bool(spec.global_layer_step)),
        ),
        "o_bias": (spec.o_bias == spec.qkv_bias, f"model.qkv_bias={spec.qkv_bias}"),
        "moe_routed_scaling": (spec.moe_routed_scaling == 1.0, "1.0"),
    }
    for key in (
        "qk_norm",
        "sliding_window",
        "attention_sinks",
        "moe_router_bias",
        "moe_expert_bias",
        "num_dense_layers",
        "moe_score_bias",
    ):
        needs[key] = (not getattr(spec, key), "off")
    needs["moe_activation"] = (spec.moe_activation == "swiglu", "'swiglu'")
    require_settings(spec, arch, needs)


def llama4_config(spec: ModelSpec) -> dict[str, Any]:
    """The transformers keys of a Llama 4 text spec (the common ones are written apart)."""
    floor = spec.attn_floor_scale
    local = "chunked_attention" if spec.attention_chunk else "full_attention"
    glob = [is_global_layer(spec, i) for i in range(spec.num_layers)]
    return dict(
        intermediate_size=spec.moe_intermediate_size,
        intermediate_size_mlp=spec.intermediate_size,
        attention_bias=spec.qkv_bias,
        attention_chunk_size=spec.attention_chunk or None,
        no_rope_layers=[int(not g) for g in glob],
        no_rope_layer_interval=spec.global_layer_step or spec.num_layers + 1,
        layer_types=["full_attention" if g else local for g in glob],
        use_qk_norm=spec.qk_l2_norm,
        attn_temperature_tuning=spec.attn_temperature_tuning,
        floor_scale=int(floor) if float(floor).is_integer() else floor,
        attn_scale=spec.attn_scale,
        num_local_experts=spec.num_experts,
        num_experts_per_tok=spec.num_experts_per_tok,
        interleave_moe_layer_step=spec.moe_layer_step,
        moe_layers=moe_layer_indices(spec),
        router_aux_loss_coef=spec.moe_aux_loss_coef / spec.num_experts_per_tok,
        router_jitter_noise=0.0,
        output_router_logits=False,
    )
