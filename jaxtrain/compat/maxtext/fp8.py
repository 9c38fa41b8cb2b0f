"""MaxText's fp8 key (`quantization: fp8` or `nanoo_fp8`) -> `model.quantization` & co.

What MaxText computes, which jaxtrain's fp8 (`jaxtrain.models.layers.fp8`) reproduces: Flax's
fp8 dot-general ops, delayed scaling over 1024 steps with max, every dense and MoE projection,
never the logits; `nanoo_fp8` uses the FNUZ types, which jaxtrain picks from the device
(`backend.fp8_formats`).
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.fp8_recipes import set_fp8_recipe
from jaxtrain.compat.common.report import KeyReport, is_off


def map_fp8(r: KeyReport, s: dict[str, Any]) -> None:
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
    set_fp8_recipe(s, "delayed")
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
