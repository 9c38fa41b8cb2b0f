"""Inspecting a run's checkpoints: `python -m jaxtrain checkpoints RUN_DIR [--verify] [--step N]`.

The listing reads only small files (Orbax metadata and the config saved with each step). A
verification reads every array of a step onto the devices here (any mesh the run trained on),
checks the shapes against the model described by the config saved with that step, the values
against the checksums saved with them, and that every floating-point value is finite. A step
whose files cannot be read (a damaged config, data state, checksums or array file) is reported
as damaged, and the other steps are still verified.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from ml_collections import ConfigDict

from jaxtrain import run
from jaxtrain.checkpoint.checksums import leaf_name
from jaxtrain.checkpoint.manager import Checkpointer, CheckpointError, unfinished_saves
from jaxtrain.checkpoint.saved_run import find_checkpoints
from jaxtrain.errors import ConfigError
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.rundir import object_store
from jaxtrain.train import state as state_lib


@dataclasses.dataclass(frozen=True)
class StepInfo:
    """One complete checkpoint: when it was written, its size, what it holds."""

    step: int
    written: float | None  # seconds since the epoch
    size_bytes: int
    summary: str


def folder_bytes(path: Path) -> int:
    """Total size of the files under a folder (a bucket's asked of the store)."""
    if object_store.is_url(str(path)):
        return object_store.folder_bytes(str(path))
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def config_summary(saved: dict[str, Any]) -> str:
    """One line on the model and run a saved config describes."""
    model = saved.get("model", {})
    try:
        spec = ModelSpec.from_config(model)
    except Exception as e:  # an old or hand-edited config: say so rather than fail the listing
        return f"unreadable model config ({e})"
    train = saved.get("train", {})
    return (
        f"{model.get('preset', spec.family)}: d={spec.hidden_size} L={spec.num_layers} "
        f"heads={spec.num_heads}/{spec.num_kv_heads} vocab={spec.vocab_size} "
        f"{spec.num_params():,} params {spec.param_dtype}; train.steps={train.get('steps')}"
    )


def _human(num_bytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if num_bytes < 1000 or unit == "TB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1000
    return ""


def list_checkpoints(path: str | Path) -> tuple[Path, list[StepInfo], list[Path]]:
    """(checkpoint folder, its complete steps oldest first, unfinished step folders)."""
    root, _ = find_checkpoints(path)
    checkpointer = Checkpointer(root, read_only=True, async_save=False)
    try:
        infos = []
        for step in checkpointer.all_steps():
            try:
                summary = config_summary(checkpointer.restore_config(step))
            except Exception as e:  # a damaged config must not hide the other steps
                summary = f"config unreadable ({type(e).__name__})"
            infos.append(
                StepInfo(
                    step,
                    checkpointer.written_at(step),
                    folder_bytes(checkpointer.step_dir(step)),
                    summary,
                )
            )
    finally:
        checkpointer.close()
    return root, infos, unfinished_saves(root)


def format_listing(root: Path, infos: list[StepInfo], unfinished: list[Path]) -> str:
    """The `checkpoints` command's table."""
    lines = [f"{root}: {len(infos)} complete checkpoint(s)"]
    if infos:
        lines.append(f"{'step':>8}  {'written':19}  {'size':>9}  config")
    for info in infos:
        when = (
            datetime.datetime.fromtimestamp(info.written).strftime("%Y-%m-%d %H:%M:%S")
            if info.written
            else "?"
        )
        lines.append(f"{info.step:>8}  {when:19}  {_human(info.size_bytes):>9}  {info.summary}")
    for path in unfinished:
        lines.append(f"unfinished (ignored on resume, removed by the next run): {path.name}")
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Verification:
    """What reading a step back found; `problems` is empty when the step is sound."""

    step: int
    arrays: int
    values: int
    problems: list[str]

    @property
    def ok(self) -> bool:
        """Whether the step restores intact."""
        return not self.problems

    def __str__(self) -> str:
        if self.ok:
            return (
                f"step {self.step}: OK: {self.arrays} arrays ({self.values:,} values) read; "
                "shapes match the saved config's model; checksums match; all values finite"
            )
        return "\n".join([f"step {self.step}: FAILED"] + [f"  {p}" for p in self.problems])


def _non_finite(state: Any) -> list[str]:
    named = [
        (leaf_name(p), x)
        for p, x in jax.tree_util.tree_flatten_with_path(state)[0]
        if jnp.issubdtype(x.dtype, jnp.floating)
    ]
    counts = jax.device_get(
        jax.jit(lambda xs: [jnp.sum(~jnp.isfinite(x)) for x in xs])([x for _, x in named])
    )
    return [
        f"{name}: {int(c):,} non-finite values" for (name, _), c in zip(named, counts) if int(c)
    ]


# What reading a damaged step can raise: the checkpoint layer's own error, and what a damaged
# or hand-edited JSON item gives on its way (JSONDecodeError is a ValueError; a config missing a
# section is a KeyError or AttributeError; a value of the wrong kind a TypeError or ConfigError).
READ_ERRORS = (
    CheckpointError,
    ConfigError,
    ValueError,
    KeyError,
    AttributeError,
    TypeError,
    OSError,
)


def _damaged(root: Path, steps: list[int], step: int, detail: str) -> list[str]:
    earlier = [s for s in steps if s < step]
    fix = (
        f"to resume from step {earlier[-1]}, move it away: mv {root / str(step)} "
        f"{root / str(step)}.damaged"
        if earlier
        else "there is no earlier checkpoint"
    )
    return [
        f"checkpoint step {step} in {root} is damaged: {detail}.",
        f"It cannot be resumed from; {fix}.",
    ]


def _verify_step(
    checkpointer: Checkpointer, root: Path, steps: list[int], step: int, devices: list[Any] | None
) -> Verification:
    try:
        saved = ConfigDict(checkpointer.restore_config(step))
        layout = run.for_reading(saved, devices).layout
    except READ_ERRORS as e:
        first = (str(e).strip().splitlines() or [""])[0][:200]
        return Verification(
            step,
            0,
            0,
            _damaged(
                root,
                steps,
                step,
                f"the config saved with it cannot be read ({type(e).__name__}: {first})",
            ),
        )
    arrays = len(jax.tree.leaves(layout.abstract))
    values = state_lib.count_params(layout.abstract)
    try:
        state, _, _ = checkpointer.restore(step, layout.abstract)
    except READ_ERRORS as e:
        lines = str(e).splitlines() or [type(e).__name__]
        if not isinstance(e, CheckpointError):  # not yet worded by the checkpoint layer
            lines = _damaged(root, steps, step, f"{type(e).__name__}: {lines[0][:200]}")
        return Verification(step, arrays, values, lines)
    return Verification(step, arrays, values, _non_finite(state))


def verify_steps(
    path: str | Path, step: int | None = None, devices: list[Any] | None = None, every: bool = True
) -> Iterator[Verification]:
    """Verifies `step`, or the step `path` names, or else every complete step newest first (only
    the latest when not `every`), yielding each Verification as it is done. A damaged step is
    reported in its Verification and the next one is still verified; CheckpointError when there
    is no such step."""
    root, named_step = find_checkpoints(path)
    checkpointer = Checkpointer(root, read_only=True, async_save=False)
    try:
        steps = checkpointer.all_steps()
        if not steps:
            raise CheckpointError(f"{root} holds no complete checkpoint.")
        step = step if step is not None else named_step
        if step is not None and step not in steps:
            raise CheckpointError(f"{root} has no checkpoint at step {step}; saved steps: {steps}.")
        chosen = [step] if step is not None else sorted(steps, reverse=True)
        for s in chosen if every else chosen[:1]:
            yield _verify_step(checkpointer, root, steps, s, devices)
    finally:
        checkpointer.close()


def verify(
    path: str | Path, step: int | None = None, devices: list[Any] | None = None
) -> Verification:
    """Reads every array of `step` (latest by default) and checks it; see the module doc."""
    (result,) = verify_steps(path, step, devices, every=False)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `checkpoints`: the run or folder, and whether to verify (which step)."""
    parser.add_argument("run", help="run directory or checkpoint folder")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="read every array of every step (newest first) and check it; exit "
        "status 1 when any step is damaged",
    )
    parser.add_argument(
        "--step", type=int, default=None, help="verify only this step (default: every step)"
    )


def handle(args: argparse.Namespace) -> int:
    """Prints the listing and, with --verify, each step's verification; 1 when any is damaged."""
    print(format_listing(*list_checkpoints(args.run)), flush=True)
    if not args.verify:
        return 0
    damaged = 0
    for result in verify_steps(args.run, args.step):
        print(result, flush=True)
        damaged += not result.ok
    if damaged:
        print(f"{damaged} damaged step(s)", flush=True)
    return 1 if damaged else 0
