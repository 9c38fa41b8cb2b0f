"""Reading a checkpoint's arrays: each local shard is read once, by TensorStore, straight into the
host buffer that is handed to its device.

Orbax's own restore (orbax-checkpoint 0.12, `serialization._read_shard`) has TensorStore read each
chunk into a buffer of its own, copies it into a zero-filled numpy array, and `jax.device_put`s a
copy of that into memory the device allocates: three buffers the size of the shard, where a plain
read of the file fills one. Here TensorStore copies the shard into a buffer aligned as XLA wants
it, and on a CPU device that buffer becomes the array's memory without a copy (`may_alias`): two
buffers, and half the CPU time of Orbax's read (docs/performance.md). A GPU copies the buffer to
device memory, as before.

`ShardReadArrayHandler` is Orbax's jax.Array handler with this read: saving, metadata and the
on-disk layout are Orbax's own, so checkpoints written before and after it are the same format.
Arrays it does not cover (no concrete target sharding, random keys, a non-OCDBT checkpoint, a
dispatcher, other memory kinds) are restored by Orbax's code, unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
import tensorstore as ts

# XLA:CPU takes a host buffer as an array's memory only when it is aligned to this (its
# `cpu_function_runtime::MinAlign`); otherwise `device_put` copies it.
BUFFER_ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-ordered array whose data starts on a BUFFER_ALIGNMENT boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + BUFFER_ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % BUFFER_ALIGNMENT
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def _is_key_dtype(dtype: Any) -> bool:
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _default_memory(sharding: jax.sharding.Sharding) -> bool:
    """Whether `sharding` places arrays in their devices' default memory."""
    kind = sharding.memory_kind
    if kind is None:
        return True
    device = next(iter(sharding.addressable_devices))
    return kind == device.default_memory().kind


def covered(infos: Sequence[Any], args: Sequence[Any] | None) -> bool:
    """Whether every array of a deserialize call can be read here (else Orbax's read runs).

    Needs a concrete target sharding in default memory, a target dtype that is not a random
    key, Orbax's default strict shape check, and an OCDBT checkpoint (the layout every
    checkpoint of this project has; the older per-array folders go to Orbax's checks)."""
    if args is None or len(args) != len(infos):
        return False
    for info, arg in zip(infos, args, strict=True):
        sharding = getattr(arg, "sharding", None)
        if (
            not isinstance(arg, ocp.type_handlers.ArrayRestoreArgs)
            or not isinstance(sharding, jax.sharding.Sharding)
            or not _default_memory(sharding)
            or arg.dtype is None
            or _is_key_dtype(arg.dtype)
            or not getattr(arg, "strict", True)
            or not info.is_ocdbt_checkpoint
            or info.skip_deserialize
        ):
            return False
    return True


async def _all(coroutines: Iterable[Awaitable[Any]]) -> list[Any]:
    """The results of `coroutines`, run together; the first error is raised once all have
    finished, so that no read is left running after its event loop has closed."""
    results = await asyncio.gather(*coroutines, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _hashable(index: tuple[slice, ...]) -> tuple[tuple[Any, Any, Any], ...]:
    return tuple((s.start, s.stop, s.step) for s in index)


async def _read_shard(
    store: ts.TensorStore, index: tuple[slice, ...], devices: list[jax.Device], dtype: np.dtype
) -> list[jax.Array]:
    """The shard `index` of `store`, read once and placed on each of `devices`."""
    shape = tuple(len(range(*s.indices(n))) for s, n in zip(index, store.shape, strict=True))
    buffer = aligned_empty(shape, dtype)
    await ts.array(buffer, copy=False, write=True).write(store[index] if index else store)
    # The first device may take the buffer as its memory (`may_alias`); every other device
    # holding the same shard (replication) gets a copy of that array, so that no two arrays
    # share memory. (`device_put` of the same host buffer to a second CPU device aliases it too.)
    first = jax.device_put(buffer, devices[0], may_alias=True)
    return [first, *(jax.device_put(first, device) for device in devices[1:])]


async def read_array(info: Any, arg: Any) -> jax.Array:
    """The array `info` names, placed as `arg.sharding` says and in `arg.dtype`."""
    spec = ocp.type_handlers.get_json_tspec_read(
        info, use_ocdbt=True, raise_array_data_missing_error=info.raise_array_data_missing_error
    )
    try:
        store = await ts.open(spec, open=True, context=info.ts_context)
        wanted = np.dtype(arg.dtype)
        if store.dtype.numpy_dtype != wanted:
            store = ts.cast(store, wanted)
        shape = tuple(store.shape)
        if arg.global_shape is not None and tuple(arg.global_shape) != shape:
            raise ValueError(
                f"the checkpoint holds shape {shape} and the restore asks for "
                f"{tuple(arg.global_shape)}"
            )
        devices_by_index: dict[Any, tuple[tuple[slice, ...], list[jax.Device]]] = {}
        for device, index in arg.sharding.addressable_devices_indices_map(shape).items():
            devices_by_index.setdefault(_hashable(index), (index, []))[1].append(device)
        shards = await _all(
            _read_shard(store, index, devices, wanted)
            for index, devices in devices_by_index.values()
        )
    except Exception as e:  # name the array: TensorStore's message names only its spec
        raise RuntimeError(f"reading array {info.name}: {e}") from e
    return jax.make_array_from_single_device_arrays(
        shape, arg.sharding, [x for group in shards for x in group]
    )


async def _settled(awaitable: Awaitable[Any]) -> Any:
    """`awaitable`'s result; when it fails, the tasks it started are waited for first.

    Orbax gathers TensorStore futures without `return_exceptions` (opening every array for its
    metadata, its own reads): the first failure returns while the other futures still run, and
    `run_sync` then closes its event loop under them. Each one that completes later calls back
    into the closed loop, and Python prints `RuntimeError: Event loop is closed` with a traceback
    per future, after the damage itself was reported. Only tasks created while `awaitable` ran
    are waited for: those that were there before include the callers waiting for this one.
    """
    before = asyncio.all_tasks()
    try:
        return await awaitable
    except Exception:
        started = [task for task in asyncio.all_tasks() - before if not task.done()]
        await asyncio.gather(*started, return_exceptions=True)
        raise


class ShardReadArrayHandler(ocp.type_handlers.ArrayHandler):
    """Orbax's jax.Array handler whose restore reads each shard once (see the module)."""

    async def metadata(self, infos: Sequence[Any]) -> Sequence[Any]:
        """Orbax's metadata of `infos`, leaving nothing running when an array cannot be opened."""
        return await _settled(super().metadata(infos))

    async def deserialize(
        self, infos: Sequence[Any], args: Sequence[Any] | None = None
    ) -> Sequence[jax.Array]:
        """The arrays of `infos`, read here when `covered`, else by Orbax."""
        if self.has_dispatcher() or not covered(infos, args):
            return await _settled(super().deserialize(infos, args))
        await asyncio.gather(*(info.await_path_creation() for info in infos))
        return await _all(read_array(info, arg) for info, arg in zip(infos, args, strict=True))


def type_handler_registry() -> Any:
    """Orbax's standard type handlers, with `ShardReadArrayHandler` for jax.Array."""
    orbax_arrays = ocp.type_handlers.get_type_handler(jax.Array)
    # Orbax finds where array metadata is saved through this attribute of the jax.Array
    # handler (`array_metadata_store.resolve_array_metadata_store`): keep Orbax's store.
    store = getattr(orbax_arrays, "_array_metadata_store", None)
    handlers = [
        (ty, ocp.type_handlers.get_type_handler(ty))
        for ty in ocp.type_handlers.supported_types()
        if ty is not jax.Array
    ]
    handlers.append((jax.Array, ShardReadArrayHandler(array_metadata_store=store)))
    return ocp.type_handlers.create_type_handler_registry(*handlers)
