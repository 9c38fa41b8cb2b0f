"""Value checksums of a train state and its data-iterator state, saved beside each checkpoint
and checked on restore.

Orbax stores arrays without checksums: a flipped or overwritten byte in an array file restores
silently as a wrong value. Each array's checksum is a sum, modulo 2^32, of one 32-bit hash per
value, `sum_i fmix32(bits(x_i) XOR fmix32(i * phi + 1))`, where `fmix32` is MurmurHash3's
finaliser (a bijection of 32-bit words), `i` the value's row-major position and `phi` the golden
ratio constant; it is computed on the devices where the array lives. Integer addition modulo
2^32 gives the same result in any reduction order, so the checksum does not depend on how the
array is sharded: a checkpoint restored onto another mesh checks the same. Any change of one
value changes its term (a bijection) and so the sum; the position enters the hash non-linearly,
so swapping two values (even `0.5` and `-0.5`, whose bits differ only in the sign) changes it
too, except by a 2^-32 coincidence.

The data-iterator state (a small JSON object) is covered by a SHA-256 of its canonical JSON.

Saved layout: `{"__format__": 2, "__data__": "<sha256 hex>", "<array name>": <checksum>, ...}`.
Checkpoints written before the format had a number hold only `{"<array name>": <checksum>}`,
computed as `sum_i bits(x_i) * (2i + 1)`; they are still checked with that formula.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

FORMAT = 2
FORMAT_KEY = "__format__"
DATA_KEY = "__data__"
_UINT = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}
_MOD = 2**32
_PHI = 0x9E3779B9  # 2^32 / golden ratio: spreads consecutive positions over the word


def leaf_name(path: Any) -> str:
    """Dotted name of a tree path (dict keys, sequence indices and named-tuple fields)."""
    parts = []
    for key in path:
        for attr in ("key", "idx", "name"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
    return ".".join(parts)


def _words(x: jax.Array) -> jax.Array:
    """The raw bits of `x` as uint32; 8-byte values become two words along a new last axis."""
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    return jax.lax.bitcast_convert_type(x, _UINT.get(x.dtype.itemsize, jnp.uint32)).astype(
        jnp.uint32
    )


def _positions(shape: tuple[int, ...]) -> jax.Array:
    """Row-major position of every element (mod 2^32), from iotas: reshaping a sharded array
    could gather it."""
    position = jnp.zeros(shape, jnp.uint32)
    for axis in range(len(shape)):
        stride = math.prod(shape[axis + 1 :]) % _MOD
        position = position + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride)
    return position


def _fmix32(h: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finaliser: a bijection in which every input bit affects every
    output bit."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def _checksum(x: jax.Array) -> jax.Array:
    bits = _words(x)
    salt = _fmix32(_positions(bits.shape) * jnp.uint32(_PHI) + jnp.uint32(1))
    return jnp.sum(_fmix32(bits ^ salt), dtype=jnp.uint32)


def _checksum_v1(x: jax.Array) -> jax.Array:
    """The formula of checkpoints saved without a format number (kept to check them)."""
    bits = _words(x)
    return jnp.sum(
        bits * (_positions(bits.shape) * jnp.uint32(2) + jnp.uint32(1)), dtype=jnp.uint32
    )


_checksums_jit = {
    FORMAT: jax.jit(lambda leaves: [_checksum(x) for x in leaves]),
    1: jax.jit(lambda leaves: [_checksum_v1(x) for x in leaves]),
}


class Pending:
    """Checksums dispatched to the devices and not read back yet.

    Dispatching returns at once; the devices compute the checksums from the arrays as they are
    then, before any later computation that is handed (donated) those arrays. `result()` waits
    for the values, so a save can read them back on its writer thread while training goes on.
    """

    def __init__(self, names: list[str], values: list[jax.Array], extra: dict[str, Any]):
        self._names, self._values, self._extra = names, values, extra

    def result(self) -> dict[str, Any]:
        """{**extra, dotted leaf name: checksum}, waiting for the devices."""
        values = jax.device_get(self._values)
        return {
            **self._extra,
            **{name: int(np.asarray(v)) for name, v in zip(self._names, values, strict=True)},
        }


def dispatch(tree: Any, fmt: int = FORMAT, extra: dict[str, Any] | None = None) -> Pending:
    """Starts the checksums of every array leaf of `tree` on the devices (see `Pending`)."""
    named = [
        (leaf_name(path), leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
        if hasattr(leaf, "dtype")
    ]
    values = _checksums_jit[fmt]([leaf for _, leaf in named]) if named else []
    return Pending([name for name, _ in named], values, dict(extra or {}))


def checksums(tree: Any, fmt: int = FORMAT) -> dict[str, int]:
    """{dotted leaf name: checksum} of every array leaf (waits for the arrays to be computed)."""
    return dispatch(tree, fmt).result()


def data_digest(data_state: Any) -> str:
    """SHA-256 of the canonical JSON of a data-iterator state (key order does not matter)."""
    text = json.dumps(data_state, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def record_later(tree: Any, data_state: Any) -> Pending:
    """What a checkpoint saves in its `checksums` item for `tree` and `data_state`, dispatched:
    `result()` gives it."""
    return dispatch(tree, extra={FORMAT_KEY: FORMAT, DATA_KEY: data_digest(data_state)})


def record(tree: Any, data_state: Any) -> dict[str, Any]:
    """What a checkpoint saves in its `checksums` item for `tree` and `data_state`."""
    return record_later(tree, data_state).result()


def mismatches(saved: dict[str, Any], tree: Any) -> list[str]:
    """Names of arrays of `tree` whose checksums differ from those `saved` (in its format);
    arrays without a saved checksum are not reported."""
    fmt = int(saved.get(FORMAT_KEY, 1))
    restored = checksums(tree, fmt)
    return sorted(k for k in restored if k in saved and int(saved[k]) != restored[k])


def data_mismatch(saved: dict[str, Any], data_state: Any) -> bool:
    """Whether `data_state` differs from the one whose digest was saved (False when the
    checkpoint recorded none)."""
    return DATA_KEY in saved and saved[DATA_KEY] != data_digest(data_state)
