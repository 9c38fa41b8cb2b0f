"""Reading a run directory back: its resolved config, its checkpoints, its parameters."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from flax import nnx
from ml_collections import ConfigDict

from jaxtrain import run
from jaxtrain.checkpoint.manager import Checkpointer, CheckpointError
from jaxtrain.config import loader as config_lib
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.rundir.object_store import is_url
from jaxtrain.rundir.step_folders import committed_step
from jaxtrain.train import state as state_lib


def load_run_config(run_dir: str | Path) -> ConfigDict:
    """The resolved config a run was started with (`<run dir>/config.json`), as
    `config.loader.read_saved_config` reads it."""
    return config_lib.read_saved_config(run_dir)


def _is_step_folder(path: Path) -> bool:
    """A committed step folder that holds a train state (not any folder named by a number)."""
    return committed_step(path) is not None and (path / "state").is_dir()


def find_checkpoints(path: str | Path) -> tuple[Path, int | None]:
    """(Orbax checkpoint folder, step or None) from a run directory, a checkpoint folder or one
    step folder of it; CheckpointError when `path` is none of these."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path} does not exist.")
    if _is_step_folder(path):
        return path.parent.absolute(), committed_step(path)
    if config_lib.saved_config_path(path).is_file() and not (path / "checkpoints").is_dir():
        # A run whose checkpoint.dir pointed elsewhere (a bucket URL stays as it is).
        elsewhere = config_lib.checkpoint_dir(load_run_config(path))
        return (elsewhere if is_url(str(elsewhere)) else elsewhere.absolute()), None
    if (path / "checkpoints").is_dir():
        return (path / "checkpoints").absolute(), None
    if path.is_dir() and any(_is_step_folder(p) for p in path.iterdir()):
        return path.absolute(), None
    raise CheckpointError(
        f"{path} is neither a jaxtrain run directory (config.json, "
        "checkpoints/) nor an Orbax checkpoint folder (numbered step folders)."
    )


@dataclasses.dataclass
class RunParams:
    """The parameters of one checkpoint of a run, with what is needed to use them."""

    params: Any  # pure dict of global arrays, on `layout`'s shardings
    cfg: ConfigDict  # the run's config
    spec: ModelSpec
    step: int
    layout: state_lib.StateLayout


def restore_params(
    run_dir: str | Path, step: int | None = None, devices: list[Any] | None = None
) -> RunParams:
    """A checkpoint's parameters only (the optimizer state is not read); latest by default."""
    cfg = load_run_config(run_dir)
    checkpointer = Checkpointer(config_lib.checkpoint_dir(cfg), async_save=False, read_only=True)
    steps = checkpointer.all_steps()
    if not steps:
        raise CheckpointError(
            f"run {run_dir} has no complete checkpoint in {checkpointer.directory}."
        )
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise CheckpointError(
            f"run {run_dir} has no checkpoint at step {step}; saved steps: {steps}."
        )
    setup = run.for_reading(cfg, devices)
    try:
        params = checkpointer.restore_params(step, setup.layout.abstract["params"])
    finally:
        checkpointer.close()
    return RunParams(params, cfg, setup.spec, step, setup.layout)


def load_model(run_dir: str | Path, step: int | None = None) -> tuple[nnx.Module, ConfigDict, int]:
    """(model with the checkpoint's parameters, run config, step) for sampling or export."""
    restored = restore_params(run_dir, step)
    return nnx.merge(restored.layout.graphdef, restored.params), restored.cfg, restored.step
