"""Orbax checkpoints of a run: train state, data-iterator state, the resolved config and value
checksums, saved together as one composite step folder, asynchronously, keeping the last K (and
every `keep_every`-th step for good).

A step folder that was still being written when a process died is not finalised (Orbax writes
`<step>.orbax-checkpoint-tmp*` and renames it on commit), and Orbax never lists it; the previous
complete step is used instead, and a writer removes the leftover folder when it starts.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

from jaxtrain.checkpoint import checksums as checksums_lib
from jaxtrain.checkpoint import items, orbax_s3
from jaxtrain.errors import JaxtrainError
from jaxtrain.hardware import writable
from jaxtrain.rundir import disk_full, object_store
from jaxtrain.rundir.step_folders import committed_steps, step_folder, unfinished_saves

# The items of a step folder, each a subfolder; Orbax lists those written in the step's metadata.
ITEMS = ("state", "data", "config", "checksums")
# How often a wait for the save in flight looks whether it has finished.
SAVE_POLL_S = 0.01


class CheckpointError(JaxtrainError, RuntimeError):
    """A checkpoint that cannot be restored into this run; the message names what differs."""


def _shape_tree(metadata: Any, attr: str = "shape") -> dict[str, Any]:
    flat = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(metadata)[0]:
        value = getattr(leaf, attr, None)
        if value is not None:
            # Metadata stores named tuples as dicts: compare by the bare key names.
            flat[checksums_lib.leaf_name(path)] = tuple(value) if attr == "shape" else value
    return flat


def _castable(saved: str, wanted: str) -> bool:
    """Floating-point arrays convert between widths (a bfloat16 run from a float32 checkpoint
    and back); integers and booleans are counters and masks whose dtype is part of the model."""
    return all(jnp.issubdtype(np.dtype(d), jnp.floating) for d in (saved, wanted))


def _cast(restored: Any, target: Any) -> Any:
    """`restored` with each array cast to the dtype of its `target` leaf where they differ."""
    return jax.tree.map(
        lambda x, a: x if x.dtype == a.dtype else x.astype(a.dtype), restored, target
    )


def describe_dtype_changes(changes: list[tuple[str, str, str]]) -> str:
    """'36 arrays float32 -> bfloat16 (params.embed.embedding, ...)', one part per pair."""
    pairs: dict[tuple[str, str], list[str]] = {}
    # Parameters first: the optimizer's moments follow them.
    for name, saved, wanted in sorted(
        changes, key=lambda c: (not c[0].startswith("params."), c[0])
    ):
        pairs.setdefault((saved, wanted), []).append(name)
    return "; ".join(
        f"{len(names)} array(s) {saved} -> {wanted} ({', '.join(names[:3])}"
        f"{', ...' if len(names) > 3 else ''})"
        for (saved, wanted), names in pairs.items()
    )


def check_writable(directory: Path) -> None:
    """CheckpointError now, rather than a failed save after hours of training: creates the
    folder and writes in it (`hardware.writable`). A bucket is probed by writing and deleting
    an object."""
    if object_store.is_url(str(directory)):
        object_store.check_reachable(str(directory), write=True)
        return
    try:
        writable.probe(directory, create=True)
    except OSError as e:
        raise CheckpointError(
            f"checkpoint folder {directory} is not writable ({e.strerror or e}); nothing was "
            "trained. Point checkpoint.dir (or run.dir) at a folder this process can write, or "
            "fix its permissions."
        ) from e


def _first_line(error: BaseException, limit: int = 300) -> str:
    """TensorStore errors embed a whole JSON spec: keep the part that says what failed."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if len(text) <= limit else text[:limit] + " ..."


class Checkpointer:
    """Saves and restores `{state, data, config, checksums}` under one directory.

    `read_only` opens a folder for reading (export, inspection, init_from): nothing is created,
    checked for writability or cleaned up, so it is safe while a run is writing there.
    `compression` (`checkpoint.compression`) is the codec of the arrays written; any checkpoint
    restores whatever codec it was written with.
    """

    def __init__(
        self,
        directory: Path,
        *,
        keep: int = 3,
        keep_every: int = 0,
        async_save: bool = True,
        read_only: bool = False,
        compression: str = "none",
    ):
        in_bucket = object_store.is_url(str(directory))
        self.directory = epath.Path(str(directory)) if in_bucket else Path(directory).absolute()
        self._poll_saves = True  # see _await_save_in_flight
        if in_bucket:  # a missing bucket or refused keys: one line, before anything is built
            object_store.check_reachable(str(directory), write=not read_only)
        elif not read_only:
            check_writable(self.directory)
        # Listed before the manager starts: a writer removes these leftovers when it opens.
        self.unfinished = [] if read_only else unfinished_saves(self.directory)
        options = orbax_s3.options(
            str(self.directory),
            max_to_keep=keep if keep > 0 else None,
            keep_period=keep_every if keep_every > 0 else None,
            enable_async_checkpointing=async_save,
            create=not read_only,
            cleanup_tmp_directories=not read_only,
        )
        try:
            self._manager = ocp.CheckpointManager(
                self.directory,
                options=options,
                item_handlers={
                    "state": items.state_handler(compression),
                    "data": ocp.JsonCheckpointHandler(),
                    "config": ocp.JsonCheckpointHandler(),
                    "checksums": items.ChecksumsHandler(),
                },
            )
        except OSError as e:
            raise CheckpointError(
                f"cannot use checkpoint folder {self.directory}: {e}. "
                "Point checkpoint.dir at a writable folder."
            ) from e

    def latest_step(self) -> int | None:
        """The newest complete step, or None when the folder holds none."""
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """Every complete step, oldest first."""
        return sorted(self._manager.all_steps())

    def step_dir(self, step: int) -> Path:
        """The folder of a step."""
        return step_folder(self.directory, step)

    def written_at(self, step: int) -> float | None:
        """When a step was committed (seconds since the epoch), if Orbax recorded it."""
        try:
            nanos = self._manager.metadata(step).commit_timestamp_nsecs
        except Exception:  # metadata unreadable: fall back to the folder's time
            nanos = None
        if nanos:
            return nanos / 1e9
        path = self.step_dir(step)
        return path.stat().st_mtime if path.exists() else None

    def save(self, step: int, state: Any, data_state: Any, config: dict[str, Any]) -> None:
        """Starts writing a step (returns before the bytes are on disk when async).

        Blocks only until the state's host copy has been started (so the caller may donate
        its buffers right after) and its checksums dispatched to the devices; the checksums are
        read back and the files written in the background.
        """
        data = data_state if data_state is not None else {}
        # The data state is grain's own `DatasetIterator.get_state()`, plain JSON by design (grain's
        # Orbax handler json.dumps it too). grain's handler (`grain.checkpoint.CheckpointSave`,
        # grain 0.2.18 `_src/python/checkpoint/handler.py`) is not used for it: it writes one file
        # per process named `process_<i>-of-<n>.json` and restores only from the file of the same
        # process count, while this state (a global batch number, the same on every process)
        # lets a run resume on another number of hosts (docs/checkpoints.md); and its restore
        # sets the state into the iterator itself, before the checksum below is checked and
        # whether or not `data.reset` discards it. So it stays one JSON item, covered by the
        # checksums like the arrays.
        if step in self._manager.all_steps():  # Orbax would raise StepAlreadyExistsError
            raise CheckpointError(
                f"checkpoint step {step} already exists in {self.directory}, and a checkpoint is "
                "never overwritten. Resume from the folder's latest checkpoint, or point "
                "checkpoint.dir at another folder (or move this one away) to start over."
            )
        args = ocp.args.Composite(
            state=ocp.args.PyTreeSave(state),
            data=ocp.args.JsonSave(data),
            config=ocp.args.JsonSave(json.loads(json.dumps(config, default=str))),
            # Dispatched before the state is handed to the next step: the devices compute the
            # checksums from these values whatever that step then does with the buffers.
            checksums=items.ChecksumsSave(checksums_lib.record_later(state, data)),
        )
        self._await_save_in_flight()  # Orbax's save would wait for it too (see there)
        try:
            with self._disk_full_reported():
                self._manager.save(step, args=args, force=True)
        except BaseException:
            # A save that fails before its background thread starts leaves Orbax's "in
            # progress" flag set for good: from now on, wait in Orbax's own way.
            self._poll_saves = False
            raise

    def wait(self) -> None:
        """Blocks until every pending save is durable."""
        self._await_save_in_flight()
        with self._disk_full_reported():
            self._manager.wait_until_finished()

    def _await_save_in_flight(self) -> None:
        """Blocks until no save is in flight, waiting here rather than in Orbax's
        `wait_until_finished`: an interrupt that lands in Orbax's wait (a second signal's
        KeyboardInterrupt, `jaxtrain.train.stop`) is logged by Orbax as a failed save, with a
        traceback, before the abort line. Errors of the save are raised by the wait that
        follows."""
        while self._poll_saves and self._manager.is_saving_in_progress():
            time.sleep(SAVE_POLL_S)

    def complete_steps_on_disk(self) -> list[int]:
        """Committed step folders, listed afresh (the manager's list may hold a failed save)."""
        return committed_steps(self.directory)

    @contextlib.contextmanager
    def _disk_full_reported(self):
        """A full disk from a save (now or in the background) becomes one DiskFullError line."""
        try:
            yield
        except Exception as e:
            if not disk_full.is_disk_full(e):
                raise
            try:  # an earlier save still in flight may yet complete: report it if it does
                self._manager.wait_until_finished()
            except Exception:  # the same full disk, already being reported
                pass
            steps = self.complete_steps_on_disk()
            intact = (
                f"the checkpoints already complete there (latest: step {steps[-1]}) are intact"
                if steps
                else "no checkpoint was complete yet"
            )
            raise disk_full.disk_full_error(self.directory, "writing a checkpoint", intact) from e

    def saved_metadata(self, step: int, attr: str = "shape") -> dict[str, Any]:
        """{array name: shape (or dtype)} of a step's state, from its metadata alone."""
        try:
            return _shape_tree(self._manager.item_metadata(step)["state"], attr)
        except Exception:  # metadata unreadable: the restore itself will report the problem
            return {}

    def check_compatible(self, step: int, abstract_state: Any, partial: bool = False) -> None:
        """Raises CheckpointError listing arrays whose shapes differ from this run's model, or
        whose dtypes differ in a way a cast cannot bridge (see `dtype_changes`).

        `partial`: `abstract_state` is a subtree (e.g. only params); other saved arrays are
        not reported.
        """
        saved_shapes = self.saved_metadata(step)
        expected = _shape_tree(abstract_state)
        if not saved_shapes:
            return
        missing = sorted(set(expected) - set(saved_shapes))
        extra = [] if partial else sorted(set(saved_shapes) - set(expected))
        differ = [
            f"{k}: checkpoint {saved_shapes[k]} vs model {expected[k]}"
            for k in sorted(set(expected) & set(saved_shapes))
            if saved_shapes[k] != expected[k]
        ]
        uncastable = [
            f"{name}: checkpoint {saved} vs model {wanted}"
            for name, saved, wanted in self.dtype_changes(step, abstract_state)
            if not _castable(saved, wanted)
        ]
        if missing or extra or differ or uncastable:
            lines = [f"checkpoint step {step} in {self.directory} does not match this model:"]
            lines += [f"  shape {d}" for d in differ[:10]]
            lines += [f"  dtype {d}" for d in uncastable[:10]]
            lines += [f"  missing in checkpoint: {k}" for k in missing[:10]]
            lines += [f"  not in model: {k}" for k in extra[:10]]
            if (
                (missing or extra)
                and all("fp8_amax" in k for k in missing + extra)
                and not differ
                and not uncastable
            ):
                lines.append(
                    "Only fp8 amax histories differ: the checkpoint was written with "
                    "another model.quantization / fp8_recipe / fp8_stats. Resume with "
                    "the settings it was written with, or start a new run from its "
                    "weights with checkpoint.init_from (the histories start afresh)."
                )
            lines.append(
                "Use the config the checkpoint was written with (its config is saved "
                "beside it), or point checkpoint.dir at a new folder."
            )
            raise CheckpointError("\n".join(lines))

    def dtype_changes(self, step: int, abstract_state: Any) -> list[tuple[str, str, str]]:
        """(array name, saved dtype, this run's dtype) of every array stored in another dtype
        than `abstract_state` asks for (e.g. after changing model.param_dtype)."""
        saved = self.saved_metadata(step, "dtype")
        wanted = _shape_tree(abstract_state, "dtype")
        return [
            (name, np.dtype(saved[name]).name, np.dtype(wanted[name]).name)
            for name in sorted(set(saved) & set(wanted))
            if np.dtype(saved[name]) != np.dtype(wanted[name])
        ]

    def _as_saved(self, step: int, target: Any) -> Any:
        """`target`'s ShapeDtypeStructs with each array's saved dtype: arrays are read as they
        were written, so their checksums can be checked, and cast afterwards."""
        dtypes = self.saved_metadata(step, "dtype")
        return jax.tree_util.tree_map_with_path(
            lambda path, a: jax.ShapeDtypeStruct(
                a.shape, dtypes.get(checksums_lib.leaf_name(path), a.dtype), sharding=a.sharding
            ),
            target,
        )

    def listed_items(self, step: int) -> tuple[str, ...]:
        """The items a step's Orbax metadata says were written (all of ITEMS if unreadable).

        Checkpoints written before checksums existed list no `checksums` item; every later
        one does, so a missing `checksums/` folder is damage, not an old format.
        """
        try:
            listed = tuple(self._manager.metadata(step).item_handlers or ())
        except Exception:  # metadata unreadable: expect everything a checkpoint holds today
            listed = ()
        return listed or ITEMS

    def check_items(self, step: int) -> None:
        """CheckpointError when an item the step's metadata lists has no folder."""
        missing = [
            name for name in self.listed_items(step) if not (self.step_dir(step) / name).is_dir()
        ]
        if missing:
            names = ", ".join(f"{name}/" for name in missing)
            raise CheckpointError(
                self._damaged(
                    step, f"missing item(s) {names}: the step's metadata lists them as written"
                )
            )

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, Any, dict[str, Any]]:
        """(state placed as `abstract_state`'s shardings say, data state, config dict).

        Every item the step lists must be present; the arrays and the data state are checked
        against the checksums saved with them.
        """
        self.check_compatible(step, abstract_state)
        self.check_items(step)
        try:
            target = self._as_saved(step, abstract_state)
            restored = self._manager.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.PyTreeRestore(
                        item=target,
                        restore_args=ocp.checkpoint_utils.construct_restore_args(target),
                    ),
                    data=ocp.args.JsonRestore(),
                    config=ocp.args.JsonRestore(),
                ),
            )
        except Exception as e:  # TensorStore raises bare Exceptions for unreadable chunks
            raise CheckpointError(self._damaged(step, _first_line(e))) from e
        self.verify_checksums(step, restored["state"], restored["data"])
        return _cast(restored["state"], abstract_state), restored["data"], restored["config"]

    def restore_params(self, step: int, abstract_params: Any) -> Any:
        """Only the parameters of a step, placed and cast as `abstract_params` says.

        A partial restore: the optimizer state is not read at all. Arrays are read in their
        saved dtype (so checksums can be checked), then cast to the target dtype.
        """
        target = {"params": abstract_params}
        self.check_compatible(step, target, partial=True)
        self.check_items(step)
        item = self._as_saved(step, target)
        try:
            with ocp.Checkpointer(items.state_handler()) as reader:
                restored = reader.restore(
                    self.step_dir(step) / "state",
                    args=ocp.args.PyTreeRestore(
                        item=item,
                        restore_args=ocp.checkpoint_utils.construct_restore_args(item),
                        partial_restore=True,
                    ),
                )
        except Exception as e:  # TensorStore raises bare Exceptions for unreadable chunks
            raise CheckpointError(self._damaged(step, _first_line(e))) from e
        self.verify_checksums(step, restored)
        return _cast(restored, target)["params"]

    def saved_checksums(self, step: int) -> dict[str, Any]:
        """The checksums saved with a step ({} for checkpoints written before checksums
        existed, whose metadata lists no `checksums` item)."""
        if "checksums" not in self.listed_items(step):
            return {}
        self.check_items(step)
        try:
            saved = self._manager.restore(
                step, args=ocp.args.Composite(checksums=items.ChecksumsRestore())
            )["checksums"]
        except Exception as e:
            raise CheckpointError(
                self._damaged(step, f"checksums unreadable: {_first_line(e)}")
            ) from e
        if not isinstance(saved, dict) or not saved:
            raise CheckpointError(self._damaged(step, "its checksums/ item holds no checksums"))
        return saved

    def verify_checksums(self, step: int, tree: Any, data_state: Any = None) -> None:
        """CheckpointError naming the arrays of `tree` whose values differ from those saved,
        or saying that `data_state` (when given) differs from the saved data state."""
        saved = self.saved_checksums(step)
        if not saved:
            return
        bad = checksums_lib.mismatches(saved, tree)
        if bad:
            raise CheckpointError(
                self._damaged(
                    step,
                    f"{len(bad)} array(s) differ from the checksums saved with them: "
                    f"{', '.join(bad[:6])}{' ...' if len(bad) > 6 else ''}",
                )
            )
        if data_state is not None and checksums_lib.data_mismatch(saved, data_state):
            raise CheckpointError(
                self._damaged(
                    step,
                    "its data/ item (the data-iterator position) differs from the checksum "
                    "saved with it",
                )
            )

    def _damaged(self, step: int, detail: str) -> str:
        earlier = [s for s in self.all_steps() if s < step]
        where = self.step_dir(step)
        fix = (
            f"To resume from the previous checkpoint (step {earlier[-1]}), move the damaged "
            f"folder away: mv {where} {where}.damaged"
            if earlier
            else "There is no earlier checkpoint: restore the folder from a copy"
        )
        return (
            f"checkpoint step {step} in {self.directory} is damaged: {detail}. It cannot be "
            f"resumed from, and a run will not start over on its own. {fix}; or point "
            "checkpoint.dir at a new folder to start over."
        )

    def restore_config(self, step: int) -> dict[str, Any]:
        """Only the config saved with a step."""
        restored = self._manager.restore(
            step, args=ocp.args.Composite(config=ocp.args.JsonRestore())
        )
        return restored["config"]

    def close(self) -> None:
        """Waits for pending saves and releases the manager."""
        try:
            self.wait()
        finally:
            self._manager.close()
