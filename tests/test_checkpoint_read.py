"""How a checkpoint's arrays are read back (`jaxtrain/checkpoint/read.py`): every shard once, onto
the shardings the restoring run asks for, replicas in memory of their own, and a train step can
donate the restored state."""

from __future__ import annotations

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxtrain.checkpoint import read as checkpoint_read
from jaxtrain.checkpoint.manager import Checkpointer, CheckpointError


def _mesh(shape: tuple[int, int]) -> Mesh:
    count = shape[0] * shape[1]
    return Mesh(np.array(jax.devices()[:count]).reshape(shape), ("data", "model"))


def _state(mesh: Mesh) -> dict[str, jax.Array]:
    """Arrays sharded over one axis, both axes, none, and a scalar, with distinct values."""
    rng = np.random.default_rng(0)

    def put(value: np.ndarray, spec: P) -> jax.Array:
        return jax.device_put(value, NamedSharding(mesh, spec))

    return {
        "rows": put(rng.standard_normal((16, 24)).astype(np.float32), P("data", None)),
        "both": put(rng.standard_normal((8, 12, 6)).astype(np.float32), P("data", "model")),
        "replicated": put(np.arange(40, dtype=np.int32).reshape(4, 10), P()),
        "half": put(rng.standard_normal((4, 64)).astype(jnp.bfloat16), P(None, "model")),
        "count": put(np.asarray(7, np.int32), P()),
    }


def _abstract(state, mesh: Mesh | None = None, specs: dict[str, P] | None = None):
    """ShapeDtypeStructs of `state`, on `mesh` with `specs` where given."""
    return {
        name: jax.ShapeDtypeStruct(
            x.shape,
            x.dtype,
            sharding=NamedSharding(mesh, specs[name]) if specs else x.sharding,
        )
        for name, x in state.items()
    }


def _saved(tmp_path, state) -> Checkpointer:
    checkpointer = Checkpointer(tmp_path / "ckpt")
    checkpointer.save(1, state, {"next_index": 3}, {})
    checkpointer.wait()
    return checkpointer


@pytest.fixture
def counted_reads(monkeypatch):
    """The names of the arrays `checkpoint_read` read (rather than Orbax's own read)."""
    names: list[str] = []
    original = checkpoint_read.read_array

    async def counting(info, arg):
        names.append(info.name)
        return await original(info, arg)

    monkeypatch.setattr(checkpoint_read, "read_array", counting)
    return names


def test_every_array_is_read_by_shard_onto_the_shardings_it_was_saved_with(tmp_path, counted_reads):
    mesh = _mesh((4, 2))
    state = _state(mesh)
    restored, data, _ = _saved(tmp_path, state).restore(1, _abstract(state))
    assert sorted(counted_reads) == sorted(state)
    assert data == {"next_index": 3}
    for name, x in state.items():
        assert restored[name].dtype == x.dtype and restored[name].sharding == x.sharding, name
        np.testing.assert_array_equal(np.asarray(restored[name]), np.asarray(x), err_msg=name)
        for saved_shard, shard in zip(
            x.addressable_shards, restored[name].addressable_shards, strict=True
        ):
            assert shard.device == saved_shard.device and shard.index == saved_shard.index
            np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(saved_shard.data))


def test_a_restore_onto_another_mesh_reads_the_new_shards(tmp_path, counted_reads):
    state = _state(_mesh((4, 2)))
    other = _mesh((2, 4))
    specs = {
        "rows": P(None, "model"),
        "both": P("model", "data"),
        "replicated": P("data", None),
        "half": P(),
        "count": P(),
    }
    restored, _, _ = _saved(tmp_path, state).restore(1, _abstract(state, other, specs))
    assert sorted(counted_reads) == sorted(state)
    for name, x in state.items():
        assert restored[name].sharding == NamedSharding(other, specs[name]), name
        np.testing.assert_array_equal(np.asarray(restored[name]), np.asarray(x), err_msg=name)


def test_replicas_of_a_shard_do_not_share_memory(tmp_path):
    state = _state(_mesh((4, 2)))
    restored, _, _ = _saved(tmp_path, state).restore(1, _abstract(state))
    pointers = [
        shard.data.unsafe_buffer_pointer() for shard in restored["replicated"].addressable_shards
    ]
    assert len(set(pointers)) == len(pointers) == 8


def test_a_train_step_can_donate_the_restored_state_and_the_checkpoint_stays_intact(tmp_path):
    mesh = _mesh((4, 2))
    state = _state(mesh)
    checkpointer = _saved(tmp_path, state)
    restored, _, _ = checkpointer.restore(1, _abstract(state))
    step = jax.jit(lambda s: jax.tree.map(lambda x: x * 2, s), donate_argnums=0)
    stepped = jax.block_until_ready(step(restored))
    for name, x in state.items():
        np.testing.assert_array_equal(np.asarray(stepped[name]), np.asarray(x) * 2, err_msg=name)
    again, _, _ = checkpointer.restore(1, _abstract(state))  # checksums verified again
    for name, x in state.items():
        np.testing.assert_array_equal(np.asarray(again[name]), np.asarray(x), err_msg=name)


def test_arrays_are_cast_when_the_target_dtype_differs(tmp_path, counted_reads):
    mesh = _mesh((4, 2))
    state = {
        "weights": jax.device_put(
            np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8),
            NamedSharding(mesh, P("data", None)),
        )
    }
    checkpointer = _saved(tmp_path, state)
    target = {
        "weights": jax.ShapeDtypeStruct((8, 8), jnp.bfloat16, sharding=state["weights"].sharding)
    }
    restored, _, _ = checkpointer.restore(1, target)
    assert restored["weights"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(
        np.asarray(restored["weights"]), np.asarray(state["weights"]).astype(jnp.bfloat16)
    )


def test_a_missing_chunk_is_reported_as_damage_naming_the_step(tmp_path):
    state = _state(_mesh((4, 2)))
    checkpointer = _saved(tmp_path, state)
    for data_file in (checkpointer.step_dir(1) / "state").rglob("d/*"):
        data_file.write_bytes(b"")
    with pytest.raises(CheckpointError, match="checkpoint step 1 .* is damaged"):
        checkpointer.restore(1, _abstract(state))


def test_a_damaged_checkpoint_leaves_no_read_running_once_its_event_loop_is_closed(
    tmp_path, unraisable
):
    # Orbax opens every array for its metadata at once and stops at the first that fails; the
    # other opens used to complete after their event loop was closed, each printing a
    # traceback ("Event loop is closed") after the damage had been reported.
    state = _state(_mesh((4, 2)))
    checkpointer = _saved(tmp_path, state)
    for data_file in (checkpointer.step_dir(1) / "state").rglob("d/*"):
        data_file.write_bytes(b"")
    for _ in range(5):  # the late completions were a race: give it several chances
        with pytest.raises(CheckpointError, match="checkpoint step 1 .* is damaged"):
            checkpointer.restore(1, _abstract(state))
        time.sleep(0.2)  # time for a read left running to complete into its closed loop
    assert unraisable == []


def test_aligned_buffers_start_on_the_alignment_xla_needs():
    for shape, dtype in [((3, 5), np.float32), ((7,), jnp.bfloat16), ((), np.int64)]:
        buffer = checkpoint_read.aligned_empty(shape, dtype)
        assert buffer.shape == shape and buffer.dtype == np.dtype(dtype)
        assert buffer.flags.c_contiguous and buffer.flags.writeable
        assert buffer.ctypes.data % checkpoint_read.BUFFER_ALIGNMENT == 0


def test_restores_it_does_not_cover_go_to_orbax():
    mesh = _mesh((4, 2))
    sharding = NamedSharding(mesh, P())

    class Info:
        is_ocdbt_checkpoint = True
        skip_deserialize = False

    def args(**kwargs):
        return ocp.type_handlers.ArrayRestoreArgs(
            **{"sharding": sharding, "dtype": np.float32, **kwargs}
        )

    assert checkpoint_read.covered([Info()], [args()])
    assert not checkpoint_read.covered([Info()], None)
    assert not checkpoint_read.covered([Info()], [args(sharding=None)])
    assert not checkpoint_read.covered([Info()], [args(dtype=None)])
    assert not checkpoint_read.covered([Info()], [args(dtype=jax.dtypes.prng_key)])
    assert not checkpoint_read.covered([Info()], [args(strict=False)])
    old_layout = Info()
    old_layout.is_ocdbt_checkpoint = False
    assert not checkpoint_read.covered([old_layout], [args()])


def _layout(item: Path) -> set[str]:
    """The files and folders of a saved item, less OCDBT's data files (random names) and the
    step metadata a lone Orbax Checkpointer writes into the item (jaxtrain's is the step's)."""
    names = {str(p.relative_to(item)) for p in item.rglob("*")}
    return {
        name
        for name in names
        if not name.startswith(("d/", "ocdbt.process_0/d/")) and name != "_CHECKPOINT_METADATA"
    }


def test_saved_steps_hold_the_files_orbax_own_handler_writes(tmp_path):
    # The registry hands Orbax's array-metadata store on to the jaxtrain handler through a
    # private attribute; should a release rename it, `array_metadatas/` would silently go.
    state = {"w": jnp.arange(12.0).reshape(3, 4), "n": jnp.asarray(3, jnp.int32)}
    ours = _saved(tmp_path, state).step_dir(1) / "state"
    theirs = tmp_path / "orbax_state"
    with ocp.Checkpointer(ocp.PyTreeCheckpointHandler(use_compression=False)) as writer:
        writer.save(theirs, args=ocp.args.PyTreeSave(state))
    assert "array_metadatas/process_0" in _layout(theirs)
    assert _layout(ours) == _layout(theirs)
