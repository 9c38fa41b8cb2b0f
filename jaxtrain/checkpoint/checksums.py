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

How it is computed: each device sums the values of its own shard (`shard_map`; an array
replicated over some mesh axes is counted once, from the devices at index 0 along them), in
blocks of a few MB that stay in cache, and one `psum` adds the shards' sums. Written as one
expression over the whole array, XLA:CPU first wrote every hashed word into a temporary as large
as the array and then summed it: twice as slow, and about one call in five ten times slower
when that temporary landed on fresh pages. Arrays whose sharding is not a `NamedSharding` with
evenly divided dimensions take that global expression, which gives the same value.

The data-iterator state (a small JSON object) is covered by a SHA-256 of its canonical JSON.

Saved layout: `{"__format__": 2, "__data__": "<sha256 hex>", "<array name>": <checksum>, ...}`.
Checkpoints written before the format had a number hold only `{"<array name>": <checksum>}`,
computed as `sum_i bits(x_i) * (2i + 1)`; they are still checked with that formula.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from jaxtrain.parallel.sharding import rule_targets

FORMAT = 2
FORMAT_KEY = "__format__"
DATA_KEY = "__data__"
_UINT = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}
_MOD = 2**32
_PHI = 0x9E3779B9  # 2^32 / golden ratio: spreads consecutive positions over the word
# Bytes of one block of a shard: its hashed words stay in L2/L3 between hashing and summing.
# 1, 4 and 16 MB measured alike; below 1 MB the loop's own cost shows.
_BLOCK_BYTES = 4 << 20


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


def _largest_divisor_at_most(n: int, limit: int) -> int:
    best = 1
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            best = max([best] + [c for c in (d, n // d) if c <= limit])
    return best


def _shard_sum(x: jax.Array, offsets: list[jax.Array], global_shape: tuple[int, ...]):
    """The checksum terms of the values of `x`, a block of the array of `global_shape` that
    starts at `offsets` (one per dimension), summed modulo 2^32.

    The shard is viewed as rows of its last dimension and summed a block of rows at a time, so
    the hashed words never exist as one array of the shard's size. The flat position of an
    element is the position of its row's first value plus its column.
    """
    if x.ndim == 0:
        x, offsets, global_shape = x.reshape(1), [jnp.uint32(0)], (1,)
    words_per_value = 2 if x.dtype.itemsize == 8 else 1
    word_shape = tuple(global_shape) + ((2,) if words_per_value == 2 else ())
    strides = [math.prod(word_shape[d + 1 :]) % _MOD for d in range(x.ndim)]
    lead, cols = x.shape[:-1], x.shape[-1]
    rows = math.prod(lead)
    row_start = jnp.zeros(lead, jnp.uint32)
    for axis in range(x.ndim - 1):
        index = jax.lax.broadcasted_iota(jnp.uint32, lead, axis) + offsets[axis]
        row_start = row_start + index * jnp.uint32(strides[axis])
    first_column = offsets[-1] * jnp.uint32(strides[-1])

    def block_sum(block: jax.Array, block_row_start: jax.Array) -> jax.Array:
        bits = _words(block).reshape(block.shape[0], cols * words_per_value)
        column = jax.lax.broadcasted_iota(jnp.uint32, bits.shape, 1)
        position = block_row_start[:, None] + first_column + column
        salt = _fmix32(position * jnp.uint32(_PHI) + jnp.uint32(1))
        return jnp.sum(_fmix32(bits ^ salt), dtype=jnp.uint32)

    # Block rows that divide the row count: the blocks are then a reshape, not copies. A row
    # count with no divisor near the block size (a large prime) is summed in one piece.
    wanted = max(1, _BLOCK_BYTES // (cols * x.dtype.itemsize))
    block_rows = _largest_divisor_at_most(rows, wanted)
    blocks = rows // block_rows
    if blocks == 1 or 8 * block_rows < min(wanted, rows):
        return block_sum(x.reshape(rows, cols), row_start.reshape(rows))

    def add_block(total: jax.Array, block: tuple[jax.Array, jax.Array]):
        return total + block_sum(*block), None

    stacked = (x.reshape(blocks, block_rows, cols), row_start.reshape(blocks, block_rows))
    return jax.lax.scan(add_block, jnp.uint32(0), stacked)[0]


def _layout(x: jax.Array) -> tuple[Any, ...]:
    """How `_checksum_by_shards` computes `x`'s checksum: ("single",) on one device,
    ("named", mesh, spec) per shard, or ("global",) as one expression."""
    sharding = getattr(x, "sharding", None)
    if isinstance(sharding, SingleDeviceSharding):
        return ("single",)
    if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, jax.sharding.Mesh):
        spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
        even = all(
            size % math.prod(sharding.mesh.shape[a] for a in rule_targets(entry)) == 0
            for size, entry in zip(x.shape, spec, strict=True)
        )
        if even:
            return ("named", sharding.mesh, PartitionSpec(*spec))
    return ("global",)


def _checksum_by_shards(x: jax.Array, layout: tuple[Any, ...]) -> jax.Array:
    """`_checksum(x)`, computed per shard as `layout` (`_layout`) says."""
    if layout[0] == "global":
        return _checksum(x)
    if layout[0] == "single":
        return _shard_sum(x, [jnp.uint32(0)] * x.ndim, x.shape)
    _, mesh, spec = layout
    used = {a for entry in spec for a in rule_targets(entry)}

    def per_shard(shard: jax.Array) -> jax.Array:
        offsets = []
        for size, entry in zip(shard.shape, spec, strict=True):
            index = jnp.uint32(0)
            for axis in rule_targets(entry):  # the first axis named is the major one
                step = jax.lax.axis_index(axis).astype(jnp.uint32)
                index = index * jnp.uint32(mesh.shape[axis]) + step
            offsets.append(index * jnp.uint32(size))
        total = _shard_sum(shard, offsets, x.shape)
        for axis in mesh.axis_names:
            if axis not in used:  # a replica: only the one at index 0 counts
                total = jnp.where(jax.lax.axis_index(axis) == 0, total, jnp.uint32(0))
        return jax.lax.psum(total, mesh.axis_names)

    # check_vma off: the block loop's carry starts as a constant and becomes shard-dependent,
    # which the varying-axes check rejects; the psum above makes the result the same everywhere.
    return jax.shard_map(
        per_shard, mesh=mesh, in_specs=spec, out_specs=PartitionSpec(), check_vma=False
    )(x)


@functools.partial(jax.jit, static_argnums=0)
def _checksums_by_shards(layouts: tuple[tuple[Any, ...], ...], leaves: list[jax.Array]):
    return [_checksum_by_shards(x, layout) for x, layout in zip(leaves, layouts, strict=True)]


def _checksum_v1(x: jax.Array) -> jax.Array:
    """The formula of checkpoints saved without a format number (kept to check them)."""
    bits = _words(x)
    return jnp.sum(
        bits * (_positions(bits.shape) * jnp.uint32(2) + jnp.uint32(1)), dtype=jnp.uint32
    )


_checksums_v1 = jax.jit(lambda leaves: [_checksum_v1(x) for x in leaves])


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
    leaves = [leaf for _, leaf in named]
    if not leaves:
        values = []
    elif fmt == FORMAT:
        values = _checksums_by_shards(tuple(_layout(x) for x in leaves), leaves)
    elif fmt == 1:
        values = _checksums_v1(leaves)
    else:
        raise ValueError(
            f"checksum format {fmt} is newer than this jaxtrain knows (1 and {FORMAT}): "
            "upgrade jaxtrain to check this checkpoint"
        )
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
