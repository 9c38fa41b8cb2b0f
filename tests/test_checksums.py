"""The value checksums saved with checkpoints: what they catch, and that sharding cannot
change them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtrain import checksums


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
