"""The `config.json` keys of OLMo 3 (`Olmo3ForCausalLM`), both ways, beyond the keys every family
shares (`hf_config`).

OLMo 3's blocks norm only the attention and MLP outputs (`post_attention_layernorm`,
`post_feedforward_layernorm`), norm q and k over all heads at once, and slide a window on the
layers `layer_types` marks `sliding_attention` (three of every four by default). Its rotary
keys have two layouts: transformers 4's `rope_theta` (every layer) with `rope_scaling` (the
full-attention layers only), and transformers 5's `rope_parameters` holding one entry per
layer type. The sliding layers rotate unscaled; in the spec they use `rope_local_theta`
whenever their table differs from the global one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_gpt_oss import global_step
from jaxtrain.interop.hf_layout import require_settings
from jaxtrain.interop.hf_rope_keys import rope_fields, rope_parameters
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.models.spec.layer_pattern import is_global_layer

OLMO3_ARCHITECTURES = {"Olmo3ForCausalLM": ("olmo3", "olmo3")}
# transformers' Olmo3Config.default_theta, for a config that gives no base.
_DEFAULT_THETA = 500_000.0


def _rope(cfg: Mapping[str, Any], where: str) -> tuple[dict[str, Any], float]:
    """(the global layers' rotary fields, the sliding layers' base) from either layout."""
    params = cfg.get("rope_parameters") or {}
    if "full_attention" in params:  # transformers 5: one entry per layer type
        full = dict(params["full_attention"] or {})
        glob = rope_fields({**cfg, "rope_parameters": full}, where)
        local = dict(params.get("sliding_attention") or {})
        if (local.get("rope_type") or "default") != "default":
            raise ConfigError(
                f"{where}: rope_parameters.sliding_attention.rope_type={local['rope_type']!r} "
                "is not supported; OLMo 3's sliding layers rotate unscaled ('default')."
            )
        return glob, float(local.get("rope_theta", glob["rope_theta"]))
    # transformers 4: one base for every layer, rope_scaling on the full-attention ones.
    glob = rope_fields({**cfg, "rope_theta": cfg.get("rope_theta", _DEFAULT_THETA)}, where)
    return glob, glob["rope_theta"]


def olmo3_fields(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The spec fields of an OLMo 3 config (after the common ones are read)."""
    layers = int(cfg["num_hidden_layers"])
    types = list(
        cfg.get("layer_types")
        or ["sliding_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)]
    )
    if len(types) != layers:
        raise ConfigError(
            f"{where}: layer_types has {len(types)} entries for num_hidden_layers={layers}; "
            "give one per layer."
        )
    step = global_step(types, "full_attention", where)
    window = int(cfg.get("sliding_window") or 0)
    sliding = "sliding_attention" in types
    if sliding and not (step and window):
        raise ConfigError(
            f"{where}: layer_types={types} with sliding_window={window or None} is not "
            "supported; jaxtrain builds OLMo 3 with sliding-window layers between full ones "
            "(every layer full is fine too)."
        )
    glob, local_theta = _rope(cfg, where)
    fields: dict[str, Any] = dict(
        pre_norms=False,
        post_norms=True,
        qk_norm=True,
        qk_norm_across_heads=True,
        sliding_window=window if sliding else 0,
        global_layer_step=step if sliding else 0,
        **glob,
    )
    # The sliding layers need a table of their own only when it differs from the global one.
    if sliding and (glob["rope_scaling"] != "none" or local_theta != glob["rope_theta"]):
        fields["rope_local_theta"] = local_theta
    return fields


def check_olmo3_expressible(spec: ModelSpec, arch: str) -> None:
    """ConfigError when an OLMo 3 spec has something `Olmo3ForCausalLM` lacks."""
    needs = {
        "pre_norms": (not spec.pre_norms, "False"),
        "post_norms": (spec.post_norms, "True"),
        "qk_norm": (spec.qk_norm, "True"),
        "qk_norm_across_heads": (spec.qk_norm_across_heads, "True"),
        "o_bias": (spec.o_bias == spec.qkv_bias, f"model.qkv_bias={spec.qkv_bias}"),
        "num_experts": (not spec.num_experts, "0"),
        "norm_zero_centered": (not spec.norm_zero_centered, "False"),
    }
    if spec.sliding_window:
        # transformers rotates sliding layers by the default (unscaled) table.
        needs["rope_local_theta"] = (
            bool(spec.rope_local_theta) or spec.rope_scaling == "none",
            "> 0 with rope_scaling (the sliding layers' unscaled base)",
        )
        needs["global_layer_step"] = (spec.global_layer_step > 1, "> 1 (with sliding_window)")
    require_settings(spec, arch, needs)


def olmo3_config(spec: ModelSpec) -> dict[str, Any]:
    """The transformers keys of an OLMo 3 spec (the common ones and the rotary keys, see
    `olmo3_rope_config`, are written apart)."""
    local = "sliding_attention" if spec.sliding_window else "full_attention"
    return dict(
        attention_bias=spec.qkv_bias,
        sliding_window=spec.sliding_window or None,
        layer_types=[
            "full_attention" if is_global_layer(spec, i) else local for i in range(spec.num_layers)
        ],
    )


def olmo3_rope_config(spec: ModelSpec, transformers_major: int) -> dict[str, Any]:
    """OLMo 3's rotary keys in the installed transformers' layout (global and sliding)."""
    local_theta = spec.rope_local_theta or spec.rope_theta
    glob = rope_parameters(spec)
    if transformers_major >= 5:
        return {
            "rope_parameters": {
                "full_attention": {**glob, "rope_theta": spec.rope_theta},
                "sliding_attention": {"rope_type": "default", "rope_theta": local_theta},
            }
        }
    if local_theta != spec.rope_theta:
        raise ConfigError(
            f"model.rope_local_theta={spec.rope_local_theta} differs from model.rope_theta="
            f"{spec.rope_theta}, which transformers 4's Olmo3Config cannot write (one base for "
            "every layer); install transformers 5, or set them equal."
        )
    return {
        "rope_theta": spec.rope_theta,
        "rope_scaling": None if spec.rope_scaling == "none" else glob,
    }
