"""TorchTitan's fp8 keys (float8 `model.converters`, `quantize.*`) -> `model.quantization` & co.

What TorchTitan computes (torchao's Float8Linear), which jaxtrain's fp8
(`jaxtrain.models.layers.fp8`) reproduces: dynamic ("tensorwise", current) scaling, e4m3
forward and e5m2 gradients, every nn.Linear but those in `filter_fqns` (Primus' files filter
"output"); the routed experts only through the grouped-GEMM converter or Primus Turbo's
`use_moe_fp8` (else `model.fp8_experts=False`). Row-wise recipes and MX are refused.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.fp8_recipes import NO_FP8_ATTENTION, set_fp8_recipe
from jaxtrain.compat.common.report import KeyReport, is_off

# TorchTitan converter names of float8 / MX training (v0.2.2 registers both spellings).
TITAN_FLOAT8 = ("float8", "quantize.linear.float8")
TITAN_MX = ("mx", "quantize.linear.mx", "mxfp8", "quantize.grouped_mm.mx")


def map_fp8(r: KeyReport, s: dict[str, Any], converters: list[str], has_experts: bool) -> list[str]:
    """TorchTitan's float8 converter and `quantize.*` keys; returns the converters left for
    the caller (kernel swaps such as primus_turbo)."""
    attention = "primus_turbo.enable_attention_float8"
    if r.has(attention):
        if is_off(r.get(attention)):
            r.ignored(attention, "off: attention in model.dtype, as here")
        else:
            r.unsupported(attention, NO_FP8_ATTENTION)
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
    set_fp8_recipe(s, "current")
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
    _experts(r, s, has_experts)
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


def _experts(r: KeyReport, s: dict[str, Any], has_experts: bool) -> None:
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
