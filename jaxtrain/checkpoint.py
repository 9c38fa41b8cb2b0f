"""Orbax checkpoints of a run: train state, data-iterator state and the resolved config, saved
together as one composite step folder, asynchronously, keeping the last K.

A step folder that was still being written when a process died is not finalised, and Orbax never
lists it; the previous complete step is used instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be restored into this run; the message names what differs."""


def _shape_tree(metadata: Any) -> dict[str, tuple[int, ...]]:
    flat = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(metadata)[0]:
        shape = getattr(leaf, "shape", None)
        if shape is not None:
            # Metadata stores named tuples as dicts: compare by the bare key names.
            name = ".".join(str(next(getattr(k, a) for a in ("key", "idx", "name")
                                     if hasattr(k, a))) for k in path)
            flat[name] = tuple(shape)
    return flat


class Checkpointer:
    """Saves and restores `{state, data, config}` under one directory."""

    def __init__(self, directory: Path, *, keep: int = 3, async_save: bool = True):
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep if keep > 0 else None,
            enable_async_checkpointing=async_save,
            create=True,
        )
        try:
            self._manager = ocp.CheckpointManager(
                self.directory, options=options,
                item_handlers={"state": ocp.StandardCheckpointHandler(),
                               "data": ocp.JsonCheckpointHandler(),
                               "config": ocp.JsonCheckpointHandler()})
        except OSError as e:
            raise CheckpointError(f"cannot use checkpoint folder {self.directory}: {e}. "
                                  "Point checkpoint.dir at a writable folder.") from e

    def latest_step(self) -> int | None:
        """The newest complete step, or None when the folder holds none."""
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """Every complete step, oldest first."""
        return sorted(self._manager.all_steps())

    def save(self, step: int, state: Any, data_state: Any, config: dict[str, Any]) -> None:
        """Starts writing a step (returns before the bytes are on disk when async)."""
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=ocp.args.JsonSave(data_state if data_state is not None else {}),
            config=ocp.args.JsonSave(json.loads(json.dumps(config, default=str))),
        )
        self._manager.save(step, args=args, force=True)

    def wait(self) -> None:
        """Blocks until every pending save is durable."""
        self._manager.wait_until_finished()

    def check_compatible(self, step: int, abstract_state: Any) -> None:
        """Raises CheckpointError listing arrays whose shapes differ from this run's model."""
        try:
            saved = self._manager.item_metadata(step)["state"]
        except Exception:  # metadata unreadable: the restore itself will report the problem
            return
        saved_shapes = _shape_tree(saved)
        expected = _shape_tree(abstract_state)
        if not saved_shapes:
            return
        missing = sorted(set(expected) - set(saved_shapes))
        extra = sorted(set(saved_shapes) - set(expected))
        differ = [f"{k}: checkpoint {saved_shapes[k]} vs model {expected[k]}"
                  for k in sorted(set(expected) & set(saved_shapes))
                  if saved_shapes[k] != expected[k]]
        if missing or extra or differ:
            lines = [f"checkpoint step {step} in {self.directory} does not match this model:"]
            lines += [f"  shape {d}" for d in differ[:10]]
            lines += [f"  missing in checkpoint: {k}" for k in missing[:10]]
            lines += [f"  not in model: {k}" for k in extra[:10]]
            lines.append("Use the config the checkpoint was written with (its config is saved "
                         "beside it), or point checkpoint.dir at a new folder.")
            raise CheckpointError("\n".join(lines))

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, Any, dict[str, Any]]:
        """(state placed as `abstract_state`'s shardings say, data state, config dict)."""
        self.check_compatible(step, abstract_state)
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state),
                data=ocp.args.JsonRestore(),
                config=ocp.args.JsonRestore(),
            ))
        except (ValueError, KeyError, FileNotFoundError, OSError) as e:
            raise CheckpointError(f"checkpoint step {step} in {self.directory} could not be "
                                  f"restored: {e}") from e
        return restored["state"], restored["data"], restored["config"]

    def restore_config(self, step: int) -> dict[str, Any]:
        """Only the config saved with a step."""
        restored = self._manager.restore(step, args=ocp.args.Composite(
            config=ocp.args.JsonRestore()))
        return restored["config"]

    def close(self) -> None:
        """Waits for pending saves and releases the manager."""
        self._manager.wait_until_finished()
        self._manager.close()


def to_jsonable(value: Any) -> Any:
    """Grain iterator states hold numpy scalars and bytes; make them JSON-safe."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return {"__bytes__": value.decode("latin-1")}
    return value


def from_jsonable(value: Any) -> Any:
    """Inverse of `to_jsonable`."""
    if isinstance(value, dict):
        if set(value) == {"__bytes__"}:
            return value["__bytes__"].encode("latin-1")
        return {k: from_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_jsonable(v) for v in value]
    return value
