"""Checks of a Hugging Face checkpoint's mixture-of-experts layout against its spec, so a
mismatch reads as one sentence about experts rather than a list of missing tensor names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from jaxtrain.errors import ConfigError
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.models.spec.layer_pattern import moe_layer_indices

# Per-expert tensors: decoders' `model.layers.{i}.mlp.experts.{e}.`, Nemotron-H's
# `backbone.layers.{i}.mixer.experts.{e}.`.
_EXPERT = re.compile(
    r"^(?:model|backbone)\.layers\.(\d+)\.(?:mlp|block_sparse_moe|mixer)\.experts\.(\d+)\."
)
_FUSED = re.compile(
    r"^model\.layers\.(\d+)\.(?:mlp|feed_forward)\.experts\.(?:gate_up_proj|down_proj)$"
)
_MXFP4 = re.compile(r"\.experts\.\w+_(?:blocks|scales)$")
# Families whose checkpoints store each layer's experts fused ([E, ...] tensors).
FUSED_FAMILIES = ("gpt_oss", "llama4")
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
# Families whose checkpoint layer i is hybrid sublayers 2i (a mixer) and 2i + 1 (a
# feed-forward): Qwen3-Next and Qwen3.5 (`hf_qwen3_next`).
PAIRED_FAMILIES = ("qwen3_next", "qwen3_5", "qwen3_5_moe")


def require_settings(spec: ModelSpec, arch: str, needs: dict[str, tuple[bool, str]]) -> None:
    """ConfigError naming the first spec setting an architecture cannot express.

    `needs` maps a spec field to (whether its value can be written as `arch`, the value that
    could be).
    """
    for key, (ok, value) in needs.items():
        if not ok:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} cannot be written as {arch}; "
                f"it needs model.{key} = {value}."
            )


def is_extra_layer(name: str, spec: ModelSpec) -> bool:
    """Whether a tensor belongs to a layer past the decoder's: DeepSeek V3's multi-token
    prediction module (`model.layers.61.*`) and Qwen3-Next's / Qwen3.5's (`mtp.*`), which
    transformers does not build either."""
    if spec.family in PAIRED_FAMILIES and name.startswith("mtp."):
        return True
    match = _LAYER.match(name)
    return spec.family == "deepseek_v3" and bool(match) and int(match[1]) >= spec.num_layers


def check_expert_layout(
    where: str,
    names: Iterable[str],
    spec: ModelSpec,
    shape_of: Callable[[str], tuple[int, ...]] | None = None,
) -> None:
    """ConfigError when the checkpoint's experts (count per layer, which layers have them,
    per-expert or fused tensors) differ from what the spec expects; `shape_of` (a tensor's
    stored shape) lets fused experts be counted."""
    names = list(names)
    if any(n.endswith("weight_scale_inv") for n in names):
        raise ConfigError(
            f"{where}: checkpoint holds FP8 weights with block scales "
            "(`*.weight_scale_inv`); convert it to bfloat16 first (DeepSeek's "
            "fp8_cast_bf16.py does), then load the converted folder."
        )
    if any(_MXFP4.search(n) for n in names):
        raise ConfigError(
            f"{where}: checkpoint holds MXFP4-quantized experts (`*_blocks`, "
            "`*_scales`, as gpt-oss is published); load it in transformers with "
            "Mxfp4Config(dequantize=True), save_pretrained it in bfloat16, then "
            "load that folder."
        )
    if spec.family in FUSED_FAMILIES:
        _check_fused_layout(where, names, spec, shape_of)
        return
    if any(_FUSED.match(n) for n in names):
        raise ConfigError(
            f"{where}: checkpoint stores experts fused (`mlp.experts.gate_up_proj`"
            "); jaxtrain reads one tensor per expert (`mlp.experts.{e}.gate_proj."
            "weight`), the layout transformers' save_pretrained writes."
        )
    found: dict[int, int] = {}
    for name in names:
        if (match := _EXPERT.match(name)) and not is_extra_layer(name, spec):
            layer, expert = int(match[1]), int(match[2])
            found[layer] = max(found.get(layer, 0), expert + 1)
    if not found and not spec.num_experts:
        return
    first = spec.num_dense_layers if spec.num_experts else spec.num_layers
    paired = spec.family in PAIRED_FAMILIES
    expected = {i // 2 if paired else i: spec.num_experts for i in moe_layer_indices(spec)}
    if found != expected:
        counts = sorted(set(found.values()))
        layers = sorted(found)
        have = (
            f"{counts} expert(s) per layer in layers {layers[0]}..{layers[-1]}"
            if found
            else "no per-expert tensors"
        )
        raise ConfigError(
            f"{where}: checkpoint has {have}, but config.json says {spec.num_experts} experts "
            f"per layer in layers {first}..{spec.num_layers - 1} (num_experts / n_routed_experts"
            f"={spec.num_experts}, first_k_dense_replace={spec.num_dense_layers}); the weights "
            "and the config are from different models."
        )


def _check_fused_layout(
    where: str, names: list[str], spec: ModelSpec, shape_of: Callable[[str], tuple[int, ...]] | None
) -> None:
    """gpt-oss / Llama 4: fused `experts.gate_up_proj` in exactly the expert layers, holding
    `num_experts` experts each."""
    if any(_EXPERT.match(n) for n in names):
        raise ConfigError(
            f"{where}: checkpoint stores one tensor per expert "
            "(`experts.{e}.*`), but model.family={spec.family!r} reads fused "
            "[experts, ...] tensors (`experts.gate_up_proj`), the layout "
            "transformers' save_pretrained writes for it."
        )
    found: dict[int, int] = {}
    for name in names:
        if (match := _FUSED.match(name)) and name.endswith("gate_up_proj"):
            found[int(match[1])] = shape_of(name)[0] if shape_of else spec.num_experts
    expected = {i: spec.num_experts for i in moe_layer_indices(spec)}
    if found != expected:
        counts = sorted(set(found.values()))
        have = (
            f"{counts} expert(s) in layers {sorted(found)}" if found else "no fused expert tensors"
        )
        raise ConfigError(
            f"{where}: checkpoint has {have}, but config.json says {spec.num_experts} experts "
            f"in layers {sorted(expected)} (num_local_experts={spec.num_experts}, "
            f"interleave_moe_layer_step={spec.moe_layer_step}); the weights and the config are "
            "from different models."
        )
