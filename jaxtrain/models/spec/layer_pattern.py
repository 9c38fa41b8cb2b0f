"""Which blocks attend locally or globally, and which hold experts: the per-layer pattern of a
spec, as static descriptions the decoder turns into per-layer arrays for its scanned stacks.

Variation that keeps parameter shapes (a sliding window or chunk, RoPE or none, attention
temperature) is an `AttentionKind` per block: the stack is scanned with each block's kind
index, and the attention switches on it. Variation that changes parameter shapes (dense or
expert feed-forward) is a second stack (`Decoder.dense_layers`), see `moe_layer_indices`.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol


class ModelSpec(Protocol):
    """The fields of `jaxtrain.models.spec.hyperparameters.ModelSpec` that decide the per-layer pattern (this
    module sits below the spec, which uses it to count FLOPs per layer)."""

    num_layers: int
    sliding_window: int
    attention_chunk: int
    global_layer_step: int
    leading_global_layers: int
    nope_global: bool
    attn_temperature_tuning: bool
    qk_l2_norm: bool
    rope_local_theta: float
    learned_positions: int
    num_experts: int
    num_dense_layers: int
    moe_layer_step: int


@dataclasses.dataclass(frozen=True)
class AttentionKind:
    """What one block's attention does beyond the shared projections."""

    window: int = 0  # sliding window (0: none)
    chunk: int = 0  # chunked local attention (0: none)
    rope: bool = True  # rotate q and k
    qk_l2: bool = False  # weightless RMS norm of q and k after RoPE (Llama 4)
    temperature: bool = False  # scale q by the position-dependent temperature (Llama 4 NoPE)
    local_rope: bool = False  # rotate by the local RoPE table (Gemma 3's sliding blocks)


def is_global_layer(spec: ModelSpec, i: int) -> bool:
    """Whether block i attends globally: one of the first `leading_global_layers` (Qwen2's
    max_window_layers), or the last of each group of `global_layer_step`."""
    step = spec.global_layer_step
    return i < spec.leading_global_layers or (bool(step) and (i + 1) % step == 0)


def attention_kinds(spec: ModelSpec) -> tuple[tuple[AttentionKind, ...], tuple[int, ...]]:
    """(the distinct kinds, each block's index into them); one kind when all blocks agree."""
    positional = not spec.learned_positions  # learned positions replace RoPE (GPT-3)
    local = AttentionKind(
        window=spec.sliding_window,
        chunk=spec.attention_chunk,
        rope=positional,
        qk_l2=spec.qk_l2_norm,
        local_rope=bool(spec.rope_local_theta),
    )
    rope = positional and not spec.nope_global
    glob = AttentionKind(
        rope=rope,
        qk_l2=spec.qk_l2_norm and rope,
        temperature=spec.attn_temperature_tuning and not rope,
    )
    per_layer = [glob if is_global_layer(spec, i) else local for i in range(spec.num_layers)]
    kinds = tuple(dict.fromkeys(per_layer))
    return kinds, tuple(kinds.index(k) for k in per_layer)


def moe_layer_indices(spec: ModelSpec) -> list[int]:
    """Checkpoint indices of the expert blocks: those after `num_dense_layers`, or the last of
    each group of `moe_layer_step` (Llama 4's interleave_moe_layer_step)."""
    if not spec.num_experts:
        return []
    if spec.block_pattern:  # hybrid stacks: the E sublayers of the pattern
        return [i for i, ch in enumerate(spec.block_pattern) if ch == "E"]
    step = spec.moe_layer_step
    return [i for i in range(spec.num_dense_layers, spec.num_layers) if (i + 1) % step == 0]


def dense_layer_indices(spec: ModelSpec) -> list[int]:
    """Checkpoint indices of the dense-MLP blocks of a mixture of experts, in stack order."""
    moe = set(moe_layer_indices(spec))
    return [i for i in range(spec.num_layers) if i not in moe]


def stack_layer_indices(spec: ModelSpec) -> dict[str, list[int]]:
    """Checkpoint indices held by each block stack, slot by slot: `layers` (experts, or every
    block of a dense model) and, when a mixture of experts has dense blocks, `dense_layers`."""
    if not spec.num_experts:
        return {"layers": list(range(spec.num_layers))}
    stacks = {"layers": moe_layer_indices(spec)}
    if dense := dense_layer_indices(spec):
        stacks["dense_layers"] = dense
    return stacks
