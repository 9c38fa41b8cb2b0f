"""The value checksums saved with checkpoints: what they catch, and that sharding cannot
change them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtrain.checkpoint import checksums


def _values(dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.standard_normal((16, 24)).astype(dtype)


def test_one_flipped_bit_anywhere_changes_the_checksum():
    x = _values()
    base = checksums.checksums({"x": jnp.asarray(x)})["x"]
    bits = x.view(np.uint32).copy()
    for flat_index, bit in ((0, 0), (137, 31), (383, 17)):
        flipped = bits.copy()
        flipped.reshape(-1)[flat_index] ^= np.uint32(1 << bit)
        assert checksums.checksums({"x": jnp.asarray(flipped.view(np.float32))})["x"] != base


@pytest.mark.parametrize("pair", [(0.5, -0.5), (1.0, 2.0), (3, -3)])
def test_swapping_two_values_changes_the_checksum(pair):
    # 0.5 and -0.5 differ only in the sign bit (2^31): a position-weighted sum with odd
    # weights cancels for them; the position-salted hash does not.
    dtype = np.int32 if isinstance(pair[0], int) else np.float32
    x = np.zeros((4, 8), dtype)
    x[0, 1], x[2, 6] = pair
    swapped = x.copy()
    swapped[0, 1], swapped[2, 6] = pair[1], pair[0]
    got = checksums.checksums({"a": jnp.asarray(x), "b": jnp.asarray(swapped)})
    assert got["a"] != got["b"]


def test_the_checksum_does_not_depend_on_the_sharding():
    x = _values()
    x64 = np.arange(64, dtype=np.int64).reshape(8, 8) * 3_000_000_007  # two words per value
    single = checksums.checksums({"x": jnp.asarray(x), "y": jnp.asarray(x64)})
    devices = np.array(jax.devices()[:8]).reshape(4, 2)
    mesh = Mesh(devices, ("a", "b"))
    for spec in (PartitionSpec("a", "b"), PartitionSpec("b", None), PartitionSpec(None, "a")):
        sharded = {
            "x": jax.device_put(x, NamedSharding(mesh, spec)),
            "y": jax.device_put(x64, NamedSharding(mesh, spec)),
        }
        assert len(sharded["x"].sharding.device_set) > 1
        assert checksums.checksums(sharded) == single


def test_the_record_covers_the_data_state_whatever_its_key_order():
    state = {"w": jnp.ones((3,))}
    saved = checksums.record(state, {"next_index": 20, "epoch": 1})
    assert saved[checksums.FORMAT_KEY] == checksums.FORMAT
    assert not checksums.data_mismatch(saved, {"epoch": 1, "next_index": 20})
    assert checksums.data_mismatch(saved, {"next_index": 21, "epoch": 1})
    assert checksums.data_mismatch(saved, {})
    assert checksums.mismatches(saved, state) == []
    assert checksums.mismatches(saved, {"w": jnp.full((3,), 2.0)}) == ["w"]


def test_checksums_of_the_first_format_are_still_checked_with_their_formula():
    # Checkpoints written before the format number: {name: sum_i bits(x_i) * (2i + 1)}.
    x = _values()
    bits = x.reshape(-1).view(np.uint32).astype(np.uint64)
    weights = np.arange(bits.size, dtype=np.uint64) * 2 + 1
    old = {"x": int((bits * weights).sum() % 2**32)}
    assert checksums.mismatches(old, {"x": jnp.asarray(x)}) == []
    assert checksums.mismatches(old, {"x": jnp.asarray(x + 1)}) == ["x"]
    assert not checksums.data_mismatch(old, {"anything": 1})  # none was recorded


def test_dispatched_checksums_are_of_the_values_at_dispatch_even_if_donated_after():
    state = {"w": jnp.asarray(_values()), "step": jnp.asarray(7, jnp.int32)}
    expected = checksums.record(state, {"next_index": 3})
    pending = checksums.record_later(state, {"next_index": 3})
    # What a train step does next: hand the buffers over and write new values into them.
    step = jax.jit(lambda s: jax.tree.map(lambda x: x + 1, s), donate_argnums=0)
    after = jax.block_until_ready(step(state))
    assert pending.result() == expected
    assert checksums.mismatches(expected, after) == ["step", "w"]


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _reference(x: np.ndarray) -> int:
    """The documented formula in numpy: sum_i fmix32(bits(x_i) XOR fmix32(i * phi + 1))."""
    x = np.ascontiguousarray(x)
    if x.dtype == np.bool_:
        x = x.astype(np.uint8)
    unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint32}[x.dtype.itemsize]
    words = x.view(unsigned).astype(np.uint32).reshape(-1)
    with np.errstate(over="ignore"):
        salt = _fmix32(np.arange(words.size, dtype=np.uint32) * np.uint32(0x9E3779B9) + 1)
        return int(_fmix32(words ^ salt).astype(np.uint64).sum() % 2**32)


@pytest.mark.parametrize(
    "shape, dtype",
    [
        ((), np.float32),
        ((7,), np.float32),
        ((3, 5, 7), jnp.bfloat16),
        ((64, 33), np.int8),
        ((10, 10), np.bool_),
        ((7919, 3), np.float32),  # a prime row count: summed in one piece
        ((2048, 1024), np.float32),  # 8 MB: in blocks
        ((4, 512, 1024), np.float32),  # blocks of rows across the leading dimension
    ],
)
def test_the_blockwise_sum_is_the_documented_formula(shape, dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 50).astype(dtype)
    assert checksums.checksums({"x": jnp.asarray(x)})["x"] == _reference(np.asarray(x))


def test_eight_byte_values_are_two_words_each():
    with jax.enable_x64(True):
        x = np.arange(96, dtype=np.int64).reshape(8, 12) * 3_000_000_007
        expected = _reference(x)
        mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("a", "b"))
        assert checksums.checksums({"x": jnp.asarray(x)})["x"] == expected
        sharded = jax.device_put(x, NamedSharding(mesh, PartitionSpec("b", "a")))
        assert checksums.checksums({"x": sharded})["x"] == expected


@pytest.mark.parametrize(
    "mesh_shape, spec",
    [
        ((4, 2), PartitionSpec("a", "b")),
        ((4, 2), PartitionSpec(None, "a")),  # replicated over "b": counted once
        ((4, 2), PartitionSpec(("a", "b"), None)),  # one dimension over two axes
        ((4, 2), PartitionSpec(("b", "a"))),  # ... in the other order
        ((4, 2), PartitionSpec()),  # replicated everywhere
        ((2, 2, 2), PartitionSpec("c", None, ("a", "b"))),
    ],
)
@pytest.mark.parametrize("block_bytes", [4 << 20, 640])  # one block per shard; several
def test_each_shard_sums_its_own_values_at_their_global_positions(
    mesh_shape, spec, block_bytes, monkeypatch
):
    monkeypatch.setattr(checksums, "_BLOCK_BYTES", block_bytes)
    names = ("a", "b", "c")[: len(mesh_shape)]
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(mesh_shape), names)
    rng = np.random.default_rng(2)
    # A shape per block size: the jitted checksums are traced anew, with that block size.
    rows = 64 if block_bytes == 640 else 16
    x = rng.standard_normal((8, rows, 40) if len(spec) == 3 else (rows, 40)).astype(np.float32)
    sharded = jax.device_put(x, NamedSharding(mesh, spec))
    assert checksums.checksums({"x": sharded})["x"] == _reference(x)


def test_a_checkpoint_of_a_newer_checksum_format_is_named_not_misread():
    with pytest.raises(ValueError, match="checksum format 3 is newer"):
        checksums.mismatches({checksums.FORMAT_KEY: 3, "x": 1}, {"x": jnp.ones(3)})
