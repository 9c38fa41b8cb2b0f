"""Value checksums of a train state, saved beside each checkpoint and checked on restore.

Orbax stores arrays without checksums: a flipped or overwritten byte in an array file restores
silently as a wrong value. Each array's checksum is a position-weighted sum of its raw bits,
`sum_i bits(x_i) * (2i + 1) mod 2^32`, computed on the devices where the array lives. Integer
addition modulo 2^32 gives the same result in any reduction order, so the checksum of a state
does not depend on how it is sharded: a checkpoint restored onto another mesh checks the same.
Any single changed bit changes the sum (the weights are odd), as does a swap of two values.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_UINT = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}
_MOD = 2**32


def leaf_name(path: Any) -> str:
    """Dotted name of a tree path (dict keys, sequence indices and named-tuple fields)."""
    parts = []
    for key in path:
        for attr in ("key", "idx", "name"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
    return ".".join(parts)


def _checksum(x: jax.Array) -> jax.Array:
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    itemsize = x.dtype.itemsize
    # 8-byte values become two 32-bit words along a new last axis.
    bits = jax.lax.bitcast_convert_type(x, _UINT.get(itemsize, jnp.uint32)).astype(jnp.uint32)
    # Row-major position from iotas: reshaping a sharded array could gather it.
    position = jnp.zeros(bits.shape, jnp.uint32)
    for axis in range(bits.ndim):
        stride = math.prod(bits.shape[axis + 1:]) % _MOD
        position = position + jax.lax.broadcasted_iota(jnp.uint32, bits.shape, axis) * \
            jnp.uint32(stride)
    return jnp.sum(bits * (position * jnp.uint32(2) + jnp.uint32(1)), dtype=jnp.uint32)


_checksums_jit = jax.jit(lambda leaves: [_checksum(x) for x in leaves])


def checksums(tree: Any) -> dict[str, int]:
    """{dotted leaf name: checksum} of every array leaf (waits for the arrays to be computed)."""
    named = [(leaf_name(path), leaf) for path, leaf
             in jax.tree_util.tree_flatten_with_path(tree)[0] if hasattr(leaf, "dtype")]
    if not named:
        return {}
    values = jax.device_get(_checksums_jit([leaf for _, leaf in named]))
    return {name: int(np.asarray(v)) for (name, _), v in zip(named, values, strict=True)}


def mismatches(saved: dict[str, int], restored: dict[str, int]) -> list[str]:
    """Names of arrays present in both whose checksums differ."""
    return sorted(k for k in restored if k in saved and int(saved[k]) != restored[k])
