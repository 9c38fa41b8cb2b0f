"""The Orbax handlers of a step folder's `state` and `checksums` items.

`state` is Orbax's PyTree handler with the compression `checkpoint.compression` chooses:
TensorStore's zstd costs CPU on every save and restore, and a train state of random-looking
floats shrinks by only a few percent, so it is off by default. Each array's zarr metadata names
its codec, so a checkpoint restores whatever it was written with.

`checksums` is a JSON file like the other small items, but a save hands it the checksums still
being computed on the devices (`checksums.Pending`): they are read back and written on Orbax's
writer thread, so the training loop never waits for the checksum pass.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath

from jaxtrain.checkpoint import checksums as checksums_lib
from jaxtrain.checkpoint.read import type_handler_registry
from jaxtrain.config.loader import check_checkpoint_compression


def state_handler(compression: str = "none") -> ocp.PyTreeCheckpointHandler:
    """The handler of the `state` item (Orbax's OCDBT + zarr layout) with `compression`
    (`config.CHECKPOINT_COMPRESSIONS`), whose arrays are restored by `checkpoint_read`."""
    zstd = check_checkpoint_compression(compression) == "zstd"
    return ocp.PyTreeCheckpointHandler(
        use_compression=zstd, type_handler_registry=type_handler_registry()
    )


class ChecksumsHandler(ocp.JsonCheckpointHandler):
    """The `checksums` item: the JSON file `checksums/metadata`, written once the checksums a
    save dispatched have been read back from the devices, on the writer thread."""

    async def async_save(
        self, directory: Any, item: Any = None, args: ChecksumsSave | None = None
    ) -> list[Any]:
        """Writes `args.checksums` (a `checksums.Pending`) in the background."""
        if args is None or not isinstance(args, ChecksumsSave):
            raise TypeError("ChecksumsHandler saves ChecksumsSave(checksums=Pending) only")
        pending = args.checksums

        async def write() -> None:
            values = pending.result()  # waits for the devices: this is the writer thread
            if jax.process_index() == 0:  # one file for all processes, as for the other items
                # epath: the step folder may be in a bucket
                (epath.Path(directory) / "metadata").write_text(json.dumps(values))

        return [ocp.future.CommitFutureAwaitingContractedSignals(write(), name="checksums")]


@ocp.args.register_with_handler(ChecksumsHandler, for_save=True)
@dataclasses.dataclass
class ChecksumsSave(ocp.args.CheckpointArgs):
    """Save args of the `checksums` item: checksums dispatched on the devices."""

    checksums: checksums_lib.Pending


@ocp.args.register_with_handler(ChecksumsHandler, for_restore=True)
@dataclasses.dataclass
class ChecksumsRestore(ocp.args.CheckpointArgs):
    """Restore args of the `checksums` item (the saved JSON, as written)."""
