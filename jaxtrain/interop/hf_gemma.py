"""The `config.json` keys of Gemma 1, 2 and 3 (text: `GemmaForCausalLM`, `Gemma2ForCausalLM`,
`Gemma3ForCausalLM`), both ways, beyond the keys every family shares (`hf_config`).

Gemma 3's rotary keys have two layouts: transformers 4's `rope_theta` (global blocks),
`rope_local_base_freq` (sliding blocks) and `rope_scaling` (global blocks only), and
transformers 5's `rope_parameters` holding one entry per layer type.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_gpt_oss import global_step
from jaxtrain.interop.hf_layout import require_settings
from jaxtrain.interop.hf_rope_keys import rope_fields, rope_parameters
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.models.spec.layer_pattern import is_global_layer

GEMMA_ARCHITECTURES = {
    "GemmaForCausalLM": ("gemma", "gemma"),
    "Gemma2ForCausalLM": ("gemma2", "gemma2"),
    "Gemma3ForCausalLM": ("gemma3", "gemma3_text"),
}
GEMMA_FAMILIES = ("gemma", "gemma2", "gemma3")
# transformers' name for the tanh approximation of GELU Gemma's MLPs use (Gemma 1's legacy
# "gelu" means it too: GemmaConfig rewrites it).
TANH_GELU = "gelu_pytorch_tanh"


def _activation(cfg: Mapping[str, Any], family: str, where: str) -> None:
    key = "hidden_act" if family == "gemma" else "hidden_activation"
    act = cfg.get(key) or cfg.get("hidden_act") or TANH_GELU
    allowed = (TANH_GELU, "gelu") if family == "gemma" else (TANH_GELU,)
    if act not in allowed:
        raise ConfigError(
            f"{where}: {key}={act!r} is not supported; Gemma's GeGLU uses {TANH_GELU!r}."
        )


def _gemma3_rope(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Global and local rotary fields from either layout (the local blocks are unscaled)."""
    params = cfg.get("rope_parameters") or {}
    if "full_attention" in params:  # transformers 5
        glob = rope_fields({**cfg, "rope_parameters": params["full_attention"]}, where)
        local = dict(params.get("sliding_attention") or {})
        if (local.get("rope_type") or "default") != "default":
            raise ConfigError(
                f"{where}: rope_parameters.sliding_attention.rope_type="
                f"{local['rope_type']!r} is not supported; jaxtrain scales only global blocks."
            )
        theta = local.get("rope_theta", 10_000.0)
    else:  # transformers 4: rope_scaling applies to the global blocks
        glob = rope_fields({**cfg, "rope_theta": cfg.get("rope_theta", 1_000_000.0)}, where)
        theta = cfg.get("rope_local_base_freq", 10_000.0)
    return {**glob, "rope_local_theta": float(theta)}


def gemma_fields(cfg: Mapping[str, Any], family: str, where: str) -> dict[str, Any]:
    """The spec fields of a Gemma config (after the common ones are read)."""
    _activation(cfg, family, where)
    hidden = int(cfg["hidden_size"])
    fields: dict[str, Any] = dict(
        mlp_activation="geglu",
        norm_zero_centered=True,
        embed_multiplier=math.sqrt(hidden),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        qkv_bias=False,
        o_bias=False,
    )
    if cfg.get("attention_bias"):
        raise ConfigError(f"{where}: attention_bias=true is not supported for Gemma.")
    if family == "gemma":
        return dict(fields, sliding_window=0)
    layers = int(cfg["num_hidden_layers"])
    every = 2 if family == "gemma2" else int(cfg.get("sliding_window_pattern", 6))
    types = list(
        cfg.get("layer_types")
        or ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(layers)]
    )
    step = global_step(types, "full_attention", where)
    window = int(cfg.get("sliding_window") or 0)
    if not step or not window:
        raise ConfigError(
            f"{where}: layer_types={types} with sliding_window={window} is not supported; "
            "jaxtrain builds Gemma 2 / 3 with sliding-window blocks between global ones."
        )
    fields.update(
        post_norms=True,
        sliding_window=window,
        global_layer_step=step,
        query_pre_attn_scalar=float(cfg.get("query_pre_attn_scalar") or 256),
        attn_logit_softcap=float(cfg.get("attn_logit_softcapping") or 0.0),
        final_logit_softcap=float(cfg.get("final_logit_softcapping") or 0.0),
        qk_norm=family == "gemma3",
    )
    if family == "gemma3":
        if cfg.get("use_bidirectional_attention"):
            raise ConfigError(
                f"{where}: use_bidirectional_attention=true is not supported; jaxtrain's "
                "decoders are causal."
            )
        fields.update(_gemma3_rope(cfg, where))
    return fields


def check_gemma_expressible(spec: ModelSpec, arch: str) -> None:
    """ConfigError when a Gemma spec has something its transformers class lacks."""
    later = spec.family != "gemma"
    needs = {
        "mlp_activation": (spec.mlp_activation == "geglu", "'geglu'"),
        "norm_zero_centered": (spec.norm_zero_centered, "True"),
        "embed_multiplier": (
            math.isclose(spec.embed_multiplier, math.sqrt(spec.hidden_size)),
            f"sqrt(hidden_size) = {math.sqrt(spec.hidden_size)}",
        ),
        "post_norms": (spec.post_norms == later, str(later)),
        "qk_norm": (spec.qk_norm == (spec.family == "gemma3"), str(spec.family == "gemma3")),
        "qkv_bias": (not spec.qkv_bias, "False"),
        "num_experts": (not spec.num_experts, "0"),
        "output_multiplier": (spec.output_multiplier == 1.0, "1.0"),
    }
    if later:
        needs["global_layer_step"] = (spec.global_layer_step > 1, "> 1 (with sliding_window)")
        needs["sliding_window"] = (spec.sliding_window > 0, "> 0")
    else:
        for key in ("sliding_window", "attn_logit_softcap", "final_logit_softcap"):
            needs[key] = (not getattr(spec, key), "0")
        needs["query_pre_attn_scalar"] = (
            spec.query_pre_attn_scalar in (0.0, float(spec.head_dim)),
            f"0 or head_dim = {spec.head_dim}",
        )
    if spec.family != "gemma3":
        needs["rope_local_theta"] = (not spec.rope_local_theta, "0")
    require_settings(spec, arch, needs)


def gemma_config(spec: ModelSpec) -> dict[str, Any]:
    """The transformers keys of a Gemma spec (the common ones are written apart)."""
    cfg: dict[str, Any] = {"hidden_act": TANH_GELU, "attention_bias": False}
    if spec.family == "gemma":
        return cfg
    cfg.update(
        hidden_activation=TANH_GELU,
        # transformers' config class takes an int (every published value is one).
        query_pre_attn_scalar=_int_if_whole(spec.query_pre_attn_scalar or spec.head_dim),
        sliding_window=spec.sliding_window,
        layer_types=[
            "full_attention" if is_global_layer(spec, i) else "sliding_attention"
            for i in range(spec.num_layers)
        ],
        attn_logit_softcapping=spec.attn_logit_softcap or None,
        final_logit_softcapping=spec.final_logit_softcap or None,
    )
    return cfg


def _int_if_whole(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def gemma3_rope_config(spec: ModelSpec, transformers_major: int) -> dict[str, Any]:
    """Gemma 3's rotary keys in the installed transformers' layout (global and local)."""
    glob = rope_parameters(spec)
    if transformers_major >= 5:
        return {
            "rope_parameters": {
                "full_attention": {**glob, "rope_theta": spec.rope_theta},
                "sliding_attention": {"rope_type": "default", "rope_theta": spec.rope_local_theta},
            }
        }
    return {
        "rope_theta": spec.rope_theta,
        "rope_local_base_freq": spec.rope_local_theta,
        "rope_scaling": None if spec.rope_scaling == "none" else glob,
    }
