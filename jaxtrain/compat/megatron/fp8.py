"""Megatron's fp8 keys (`fp8: hybrid|e4m3`, `fp8_recipe` & co.) -> `model.quantization` & co.

What Megatron computes, which jaxtrain's fp8 (`jaxtrain.models.layers.fp8`) reproduces:
per-tensor scaled fp8 GEMMs in every TE linear layer (attention, MLP, grouped experts), not the
output layer, with delayed scaling (amax history `fp8_amax_history_len`,
`fp8_amax_compute_algo` max | most_recent, `fp8_margin`) or current ("tensorwise") scaling.
Primus' trainer defaults are delayed, 1024 steps, max, margin 0. Block-scaled recipes
(blockwise, mxfp8) are refused.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.fp8_recipes import NO_FP8_ATTENTION, set_fp8_recipe
from jaxtrain.compat.common.report import KeyReport, is_off

_RECIPES = {"delayed": "delayed", "tensorwise": "current"}
_BLOCK = (
    "block-scaled fp8 is not implemented; jaxtrain scales per tensor ('delayed' or 'tensorwise')"
)

# Megatron keys read here; all but `fp8` only matter when fp8 is on.
MEGATRON_KEYS = (
    "fp8",
    "fp8_recipe",
    "fp8_margin",
    "fp8_interval",
    "fp8_amax_history_len",
    "fp8_amax_compute_algo",
    "fp8_wgrad",
    "fp8_param_gather",
    "fp8_dot_product_attention",
    "fp8_multi_head_attention",
    "first_last_layers_bf16",
    "num_layers_at_start_in_bf16",
    "num_layers_at_end_in_bf16",
    "enable_turbo_attention_float8",
)


def map_fp8(r: KeyReport, s: dict[str, Any]) -> None:
    """Megatron's `--fp8` and its recipe keys (Transformer Engine's DelayedScaling & co.)."""
    mode = r.get("fp8")
    if is_off(mode):
        for key in MEGATRON_KEYS:
            if r.has(key):
                r.ignored(
                    key,
                    "fp8 is off (fp8: null): matmuls in model.dtype"
                    if key != "fp8"
                    else "unset: matmuls in model.dtype",
                )
        return
    if mode not in ("hybrid", "e4m3"):
        r.unsupported(
            "fp8",
            "neither 'hybrid' (e4m3 forward, e5m2 gradients) nor 'e4m3'",
            target="model.quantization",
        )
        return
    recipe = r.get("fp8_recipe", "delayed")
    if recipe not in _RECIPES:
        r.unsupported("fp8_recipe", _BLOCK, target="model.fp8_recipe")
        recipe = "delayed"
    algo = r.get("fp8_amax_compute_algo", "max")
    if algo not in ("max", "most_recent"):
        r.unsupported("fp8_amax_compute_algo", "neither 'max' nor 'most_recent'")
        algo = "max"
    set_fp8_recipe(
        s,
        _RECIPES[recipe],
        int(r.get("fp8_amax_history_len") or 1),
        algo,
        int(r.get("fp8_margin") or 0),
        str(mode),
    )
    r.mapped(
        "fp8",
        "model.quantization, model.fp8_format",
        "per-tensor scaled fp8 in the "
        "attention, MLP and expert projections, float32 accumulation; the output layer "
        "in model.dtype, as Transformer Engine does"
        + ("; e4m3 forward, e5m2 gradients" if mode == "hybrid" else "; e4m3 for all"),
    )
    if not r.handled("fp8_recipe"):
        r.mapped(
            "fp8_recipe",
            "model.fp8_recipe",
            "tensorwise = current scaling (this step's amax)"
            if recipe == "tensorwise"
            else "amax history of the last steps",
        )
    delayed_keys = (
        ("fp8_amax_history_len", "model.fp8_amax_history"),
        ("fp8_amax_compute_algo", "model.fp8_amax_algo"),
        ("fp8_margin", "model.fp8_margin"),
    )
    for key, target in delayed_keys:
        if not r.has(key) or r.handled(key):
            continue
        if _RECIPES.get(recipe) == "delayed" or key == "fp8_margin":
            r.mapped(key, target)
        else:
            r.ignored(key, "used only by the delayed recipe")
    _details(r)


def _details(r: KeyReport) -> None:
    """The fp8 switches around the recipe: what jaxtrain does already, or cannot."""
    interval = r.get("fp8_interval", 1)
    if r.has("fp8_interval"):
        if interval in (None, 1):
            r.ignored("fp8_interval", "deprecated; scales follow every step, as here")
        else:
            r.unsupported("fp8_interval", "scales are updated every step")
    if r.has("fp8_wgrad"):
        if r.get("fp8_wgrad") in (None, True):
            r.ignored("fp8_wgrad", "weight gradients in fp8 (x8^T dy8), as here")
        else:
            r.unsupported(
                "fp8_wgrad",
                "weight gradients in high precision are not "
                "implemented: jaxtrain computes them in fp8",
            )
    if r.has("fp8_param_gather"):
        r.ignored(
            "fp8_param_gather",
            "communication detail: parameters are gathered in their "
            "storage dtype and quantized per use, the same numbers",
        )
    for key in (
        "fp8_dot_product_attention",
        "fp8_multi_head_attention",
        "enable_turbo_attention_float8",
    ):
        if r.has(key):
            if is_off(r.get(key)):
                r.ignored(key, "off: attention in model.dtype, as here")
            else:
                r.unsupported(key, NO_FP8_ATTENTION)
    for key in (
        "first_last_layers_bf16",
        "num_layers_at_start_in_bf16",
        "num_layers_at_end_in_bf16",
    ):
        if r.has(key):
            if is_off(r.get(key)) or not r.get("first_last_layers_bf16"):
                r.ignored(key, "off: every layer in fp8, as here")
            else:
                r.unsupported(
                    key,
                    "keeping the first/last layers in bf16 is not "
                    "implemented: every block computes in fp8",
                )
