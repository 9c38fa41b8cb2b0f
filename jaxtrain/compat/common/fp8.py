"""FP8 training keys of Megatron/Primus, TorchTitan and MaxText -> `model.quantization` & co.

What each stack's fp8 computes, and what jaxtrain's (`jaxtrain.models.layers.fp8`) reproduces:

- Megatron / Transformer Engine (`fp8: hybrid|e4m3`, `fp8_recipe`): per-tensor scaled fp8
  GEMMs in every TE linear layer (attention, MLP, grouped experts), not the output layer, with
  delayed scaling (amax history `fp8_amax_history_len`, `fp8_amax_compute_algo` max |
  most_recent, `fp8_margin`) or current ("tensorwise") scaling. Primus' trainer defaults are
  delayed, 1024 steps, max, margin 0. Block-scaled recipes (blockwise, mxfp8) are refused.
- TorchTitan (`model.converters` naming float8, torchao Float8Linear): dynamic ("tensorwise",
  current) scaling, e4m3 forward and e5m2 gradients, every nn.Linear but those in
  `filter_fqns` (Primus' files filter "output"); the routed experts only through the
  grouped-GEMM converter or Primus Turbo's `use_moe_fp8` (else `model.fp8_experts=False`).
  Row-wise recipes and MX are refused.
- MaxText (`quantization: fp8`, or `nanoo_fp8` for MI300X/MI325X): Flax's fp8 dot-general ops,
  delayed scaling over 1024 steps with max, every dense and MoE projection, never the logits;
  `nanoo_fp8` uses the FNUZ types, which jaxtrain picks from the device (`backend.fp8_formats`).
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport, is_off

_RECIPES = {"delayed": "delayed", "tensorwise": "current"}
_BLOCK = (
    "block-scaled fp8 is not implemented; jaxtrain scales per tensor ('delayed' or 'tensorwise')"
)
_ATTENTION = (
    "fp8 attention (scores and softmax inputs) is not implemented; attention stays in model.dtype"
)


def _fp8_settings(
    s: dict[str, Any],
    recipe: str,
    history: int = 1024,
    algo: str = "max",
    margin: int = 0,
    fmt: str = "hybrid",
) -> None:
    s.update(
        {
            "model.quantization": "fp8",
            "model.fp8_recipe": recipe,
            "model.fp8_amax_history": history,
            "model.fp8_amax_algo": algo,
            "model.fp8_margin": margin,
            "model.fp8_format": fmt,
        }
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


def map_megatron(r: KeyReport, s: dict[str, Any]) -> None:
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
    _fp8_settings(
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
    _megatron_details(r)


def _megatron_details(r: KeyReport) -> None:
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
                r.unsupported(key, _ATTENTION)
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


# TorchTitan converter names of float8 / MX training (v0.2.2 registers both spellings).
TITAN_FLOAT8 = ("float8", "quantize.linear.float8")
TITAN_MX = ("mx", "quantize.linear.mx", "mxfp8", "quantize.grouped_mm.mx")


def map_torchtitan(
    r: KeyReport, s: dict[str, Any], converters: list[str], has_experts: bool
) -> list[str]:
    """TorchTitan's float8 converter and `quantize.*` keys; returns the converters left for
    the caller (kernel swaps such as primus_turbo)."""
    attention = "primus_turbo.enable_attention_float8"
    if r.has(attention):
        if is_off(r.get(attention)):
            r.ignored(attention, "off: attention in model.dtype, as here")
        else:
            r.unsupported(attention, _ATTENTION)
    mx = [c for c in converters if c in TITAN_MX]
    if mx:
        r.unsupported(
            "model.converters",
            f"{mx}: MXFP8 block scaling is not implemented",
            target="model.quantization",
        )
    float8 = [c for c in converters if c in TITAN_FLOAT8]
    rest = [c for c in converters if c not in TITAN_FLOAT8 + TITAN_MX]
    linear = "quantize.linear.float8"
    if not float8:
        for key in r.under("quantize") + r.under("float8"):
            if not r.handled(key):
                r.ignored(key, "used only when model.converters names float8")
        return rest
    recipe = r.get(f"{linear}.recipe_name", r.get("float8.recipe_name"))
    if recipe not in (None, "tensorwise"):
        r.unsupported(
            f"{linear}.recipe_name",
            "row-wise scaling is not implemented; jaxtrain scales per tensor (tensorwise)",
            target="model.fp8_recipe",
        )
    _fp8_settings(s, "current")
    if not mx:
        r.mapped(
            "model.converters",
            "model.quantization, model.fp8_recipe",
            f"{float8}: "
            "tensorwise (current) scaling, e4m3 forward, e5m2 gradients, float32 "
            "accumulation" + (f"; {rest} are kernel swaps" if rest else ""),
        )
    filtered = list(r.get(f"{linear}.filter_fqns", r.get("float8.filter_fqns")) or [])
    s["model.fp8_output_layer"] = "output" not in filtered
    others = [f for f in filtered if f not in ("output", "router.gate", "auto_filter_small_kn")]
    for key in (f"{linear}.filter_fqns", "float8.filter_fqns"):
        if r.has(key) and others:
            r.unsupported(
                key,
                f"{others}: per-module fp8 exclusion is not implemented; "
                "jaxtrain quantizes every attention, MLP and expert projection",
            )
        elif r.has(key):
            r.mapped(
                key,
                "model.fp8_output_layer",
                "the output layer in fp8 unless 'output' "
                "is listed; the router is never fp8 here; small layers are quantized too",
            )
    _titan_experts(r, s, has_experts)
    for key in r.under("quantize") + r.under("float8"):
        if r.handled(key):
            continue
        if key.endswith(
            ("enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp")
        ):
            r.ignored(
                key,
                "communication detail: FSDP gathers the weights in their storage "
                "dtype; each use quantizes them the same way",
            )
        elif key.endswith(".emulate"):
            r.ignored(key, "XLA emulates float8 where the device lacks it")
        else:
            r.ignored(key, "MX / grouped-GEMM setting, unused with tensorwise float8")
    return rest


def _titan_experts(r: KeyReport, s: dict[str, Any], has_experts: bool) -> None:
    """TorchTitan runs the routed experts in fp8 only through the grouped-GEMM converter (or
    Primus Turbo's `use_moe_fp8`); otherwise they stay in bf16: `model.fp8_experts=False`."""
    key = "quantize.grouped_mm.float8.fqns"
    listed = bool(r.get(key)) or bool(r.get("primus_turbo.use_moe_fp8"))
    if not has_experts:
        if r.has(key):
            r.ignored(key, "a dense model: no experts")
        return
    s["model.fp8_experts"] = listed
    for name in (key, "primus_turbo.use_moe_fp8"):
        if r.has(name):
            r.mapped(
                name,
                "model.fp8_experts",
                "the experts' grouped GEMMs in fp8"
                if listed
                else "the routed experts stay in model.dtype (only the linear layers, "
                "shared experts included, are fp8)",
            )


def map_maxtext(r: KeyReport, s: dict[str, Any]) -> None:
    """MaxText's `quantization` (and its FNUZ spelling `nanoo_fp8`)."""
    value = r.get("quantization", "")
    if is_off(value):
        if r.has("quantization"):
            r.ignored("quantization", "unset: matmuls in model.dtype")
        return
    if value not in ("fp8", "nanoo_fp8"):
        why = {
            "fp8_full": "static (fixed) fp8 scales are not implemented",
            "int8": "int8 training is not implemented",
            "intmp": "int8 mixed precision is not implemented",
        }.get(str(value), "only fp8 and nanoo_fp8 are implemented")
        r.unsupported("quantization", why, target="model.quantization")
        return
    _fp8_settings(s, "delayed")
    fnuz = (
        (
            " The FNUZ types nanoo_fp8 names are those jaxtrain picks on MI300X/MI325X "
            "(backend.fp8_formats=auto; 'fnuz' forces them)."
        )
        if value == "nanoo_fp8"
        else ""
    )
    r.mapped(
        "quantization",
        "model.quantization, model.fp8_recipe",
        "Flax's fp8 ops as "
        "MaxText uses them: delayed scaling over 1024 steps (max), e4m3 forward, e5m2 "
        "gradients, every dense and expert projection, the logits in model.dtype." + fnuz,
    )
    for key in ("quantization_local_shard_count", "replicate_quant_scale"):
        if r.has(key):
            r.ignored(key, "where the amax reduction runs (sharding detail); same numbers")
