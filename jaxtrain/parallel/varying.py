"""Making arrays vary alike over `shard_map`'s manual mesh axes, for custom gradients.

A custom gradient under `shard_map` must return each cotangent varying over the mesh axes its
input varies over; `alike` lets autodiff add the sums that make it so. The experts' tiles
(`models.layers.grouped_matmul`) and the capacity path's batched products
(`models.layers.products`) call it before their custom gradients.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def alike(*arrays: jax.Array) -> tuple[jax.Array, ...]:
    """The arrays, each made to vary over every manual mesh axis one of them varies over.

    Under `shard_map` a custom gradient must return each cotangent varying over the axes its
    input varies over. Rows varying over the token axes times weights split over `tensor`
    give a row gradient that varies over both, and its sum over `tensor` is what the rows
    need; a weight gradient from rows split over the token axes varies over them, and the
    weights need its sum over them. Adding zeros that vary over the others' axes outside the
    custom gradient makes autodiff take those sums (the transpose of varying is a sum).
    Outside `shard_map`, or where the arrays already vary alike, they are returned as they
    are."""
    each = [axes(a) for a in arrays]
    if all(a == each[0] for a in each):
        return arrays
    out = []
    for array in arrays:
        for other in arrays:
            if other is not array:
                array = array + jnp.zeros_like(other, shape=(), dtype=array.dtype)
        out.append(array)
    return tuple(out)


def axes(array: jax.Array) -> frozenset:
    """The manual mesh axes `array` varies over under `shard_map` (none elsewhere)."""
    aval = jax.typeof(array)
    manual = getattr(aval, "manual_axis_type", None)  # jax 0.10; `vma` before it
    return frozenset(manual.varying if manual is not None else getattr(aval, "vma", ()))
