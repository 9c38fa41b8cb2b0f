"""Reading a run directory back: its resolved config, its checkpoints, its parameters."""

from __future__ import annotations

import json
from pathlib import Path

from flax import nnx
from ml_collections import ConfigDict

from jaxtrain import config as config_lib
from jaxtrain import sharding
from jaxtrain.checkpoint import Checkpointer, CheckpointError
from jaxtrain.train import state as state_lib
from jaxtrain.train.optimizer import make_optimizer


def load_run_config(run_dir: str | Path) -> ConfigDict:
    """The resolved config a run was started with (`<run dir>/config.json`)."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: {run_dir} is not a jaxtrain run "
                                "directory (train once with run.dir pointing there).")
    cfg = ConfigDict(json.loads(path.read_text()))
    with cfg.unlocked():
        cfg.run.dir = str(run_dir)
    return cfg


def load_model(run_dir: str | Path, step: int | None = None) -> tuple[nnx.Module, ConfigDict, int]:
    """(model with the checkpoint's parameters, run config, step) for sampling or export."""
    cfg = load_run_config(run_dir)
    spec = config_lib.validate(_without_data_checks(cfg))
    checkpointer = Checkpointer(config_lib.checkpoint_dir(cfg), async_save=False)
    steps = checkpointer.all_steps()
    if not steps:
        raise CheckpointError(f"run {run_dir} has no complete checkpoint in "
                              f"{checkpointer.directory}.")
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise CheckpointError(f"run {run_dir} has no checkpoint at step {step}; saved steps: "
                              f"{steps}.")
    mesh = sharding.make_mesh(cfg.mesh)
    rules = sharding.RULE_PRESETS[cfg.mesh.rules]
    tx = make_optimizer(cfg.optim, cfg.train.steps)
    with sharding.use_mesh(mesh, rules):
        layout = state_lib.state_layout(spec, tx, mesh, rules)
    state, _, _ = checkpointer.restore(step, layout.abstract)
    checkpointer.close()
    return nnx.merge(layout.graphdef, state["params"]), cfg, step


def _without_data_checks(cfg: ConfigDict) -> ConfigDict:
    """A copy whose data section no longer requires shards on disk (they may have moved)."""
    copy = ConfigDict(cfg.to_dict())
    copy.data.kind = "synthetic"
    copy.train.eval_every = 0
    return copy
