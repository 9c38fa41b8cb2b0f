"""Megatron's `moe_layer_freq` (which blocks hold experts) -> jaxtrain's expert layout.

jaxtrain expresses two layouts: experts after `num_dense_layers` leading dense blocks, or in the
last block of every group of `moe_layer_step` (blocks s-1, 2s-1, ...). Megatron's integer
frequency k puts experts in blocks 0, k, 2k, ..., so only k = 1 is expressible from an integer;
list patterns are matched against both layouts.
"""

from __future__ import annotations

import ast
from typing import Any

from jaxtrain.errors import ConfigError


def moe_layers(freq: Any, num_layers: int) -> list[int]:
    """Megatron's moe_layer_freq as a 0/1 per layer: an int k marks every k-th layer; a list or
    a list expression such as "([0]*1+[1]*26)" spells the pattern (parsed, never evaluated)."""
    if isinstance(freq, int):
        return [int(i % freq == 0) for i in range(num_layers)]

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [value(e) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = value(node.left), value(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ValueError(f"unsupported expression {ast.dump(node)}")

    try:
        parsed = value(ast.parse(str(freq).strip(), mode="eval").body)
    except (SyntaxError, ValueError, TypeError) as e:
        raise ConfigError(
            f"moe_layer_freq={freq!r} is neither an int nor a list pattern ({e})."
        ) from None
    if isinstance(parsed, int):
        return moe_layers(parsed, num_layers)
    return [int(bool(x)) for x in parsed]


def _spans(layers: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5": the block indices a message names."""
    out, start = [], None
    for i, layer in enumerate(layers):
        if start is None:
            start = layer
        if i + 1 == len(layers) or layers[i + 1] != layer + 1:
            out.append(str(start) if start == layer else f"{start}-{layer}")
            start = None
    return ", ".join(out)


def expert_layout(freq: Any, num_layers: int) -> tuple[int, int, str]:
    """(num_dense_layers, moe_layer_step, "") for an expressible moe_layer_freq. Otherwise the
    layout with as many expert blocks (so the same parameter count), every step-th block when
    they divide the depth evenly, else after leading dense blocks, and why it differs, naming
    the expert blocks."""
    pattern = moe_layers(freq, num_layers)
    if len(pattern) != num_layers:
        raise ConfigError(
            f"moe_layer_freq={freq!r} gives {len(pattern)} layers but num_layers={num_layers}."
        )
    experts = [i for i, x in enumerate(pattern) if x]
    if not experts:
        return 0, 1, "no block holds experts; drop num_experts for a dense model"
    dense = pattern.index(1)
    if all(pattern[dense:]):
        return dense, 1, ""
    for step in range(2, num_layers + 1):
        if num_layers % step == 0 and pattern == [
            int((i + 1) % step == 0) for i in range(num_layers)
        ]:
            return 0, step, ""
    count = len(experts)
    step = num_layers // count if num_layers % count == 0 else 1
    dense = 0 if step > 1 else num_layers - count
    where = (
        f"blocks {step - 1}, {2 * step - 1}, ..."
        if step > 1
        else f"blocks {dense}-{num_layers - 1}"
    )
    return (
        dense,
        step,
        (
            f"experts in blocks {_spans(experts)} of 0-{num_layers - 1}: jaxtrain "
            "puts them after leading dense blocks or in the last block of every "
            "group of model.moe_layer_step; with --allow-unsupported the same "
            f"{count} expert blocks sit in {where}"
        ),
    )
