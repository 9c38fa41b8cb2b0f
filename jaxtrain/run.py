"""The one way a run is set up from its config, shared by everything that runs or plans one.

    setup = run.setup(cfg)            # validated, mesh and rules checked, state laid out
    setup.layout.abstract             # the train state's shapes and shardings, nothing allocated
    setup.abstract_batch()            # the global batch the step is compiled for
    lowered, compiled = setup.compile_train_step()   # the one jitted train step, compiled
    setup.global_batch(host_batch)    # this process's rows placed as the step's global batch

The order: every setting (`config.validate`) and the data settings (`data.sources`), the mesh
from the `ici_*`/`dcn_*` sizes and the rule table, the model and batch checked against them
(uneven shards fail late inside XLA, so they are refused here with the key to change), the
optimizer and its schedule, and the abstract train state with its shardings. The trainer, the
compile-only planner (`planning.compile`), checkpoint inspection and export and the benchmarks
start from it, so they all see the same run. The jitted train and eval steps are built here once
(`train_step`, `eval_step`), so the trainer, the planner and the benchmarks compile one program.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from ml_collections import ConfigDict

from jaxtrain.config import loader as config_lib
from jaxtrain.config import mesh_check
from jaxtrain.data import pipeline
from jaxtrain.data.sources import validate_data_config
from jaxtrain.errors import ConfigError
from jaxtrain.hardware import backend as backend_lib
from jaxtrain.hardware import xla_options
from jaxtrain.models.assembly import pipeline as pipeline_lib
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.parallel import sharding
from jaxtrain.train import state as state_lib
from jaxtrain.train import step as step_lib
from jaxtrain.train.optimizer import learning_rate_schedule, make_optimizer


def validate(cfg: ConfigDict, check_data: bool = True) -> ModelSpec:
    """Every setting, then the data settings; `check_data=False` skips what needs the files."""
    spec = config_lib.validate(cfg)
    validate_data_config(cfg, check_data)
    return spec


def rules_of(cfg: ConfigDict) -> tuple[tuple[str, Any], ...]:
    """The logical-axis rule table `mesh.rules` names."""
    if cfg.mesh.rules not in sharding.RULE_PRESETS:
        raise ConfigError(
            f"mesh.rules={cfg.mesh.rules!r} is not one of {sorted(sharding.RULE_PRESETS)}."
        )
    return sharding.RULE_PRESETS[cfg.mesh.rules]


@dataclasses.dataclass
class RunSetup:
    """What a config becomes before anything is compiled or allocated."""

    cfg: ConfigDict
    spec: ModelSpec
    mesh: Mesh
    rules: tuple[tuple[str, Any], ...]
    tx: optax.GradientTransformation
    schedule: Callable[[Any], Any]
    num_micro: int  # micro batches (gradient accumulation) per step
    layout: state_lib.StateLayout
    backend: backend_lib.Backend  # the hardware choices the step is traced with

    @property
    def axis_sizes(self) -> dict[str, int]:
        """{mesh axis: size}."""
        return sharding.mesh_shape(self.mesh)

    @functools.cached_property
    def batch_sharding(self) -> NamedSharding:
        """How a global batch is split: rows over the batch axes, positions over `context`."""
        return NamedSharding(
            self.mesh,
            sharding.logical_spec(("activation_batch", "activation_length"), dict(self.rules)),
        )

    @property
    def pipeline(self) -> pipeline_lib.Schedule:
        """How micro batches flow through the pipeline stages (when `pipeline` > 1)."""
        return mesh_check.pipeline_schedule(self.cfg)

    @contextlib.contextmanager
    def mesh_context(self) -> Iterator[None]:
        """The mesh, rules, pipeline schedule and backend model code traces under."""
        with (
            sharding.use_mesh(self.mesh, self.rules),
            backend_lib.use(self.backend),
            pipeline_lib.use(self.pipeline),
        ):
            yield

    def abstract_batch(self) -> dict[str, jax.ShapeDtypeStruct]:
        """The global batch as ShapeDtypeStructs with the batch sharding."""
        shape = (self.cfg.train.global_batch_size, self.cfg.train.seq_len)
        return {
            name: jax.ShapeDtypeStruct(shape, dtype, sharding=self.batch_sharding)
            for name, dtype in pipeline.batch_fields(self.cfg).items()
        }

    def global_batch(self, local_batch: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
        """A host batch placed as the global arrays the steps take, split by `batch_sharding`.

        `local_batch` holds this process's rows ({field: [rows, seq_len]}, the global batch
        divided by the processes); with one process, the whole batch.
        """
        return {
            name: jax.make_array_from_process_local_data(self.batch_sharding, np.asarray(rows))
            for name, rows in local_batch.items()
        }

    @functools.cached_property
    def train_step(self) -> jax.stages.Wrapped:
        """The jitted `train.step.train_step` of this run: `(state, batch) -> (state, metrics)`.

        The state comes in and goes out laid out by `layout.shardings` and is donated; the
        batch keeps the sharding it arrives with (`global_batch`, `abstract_batch`). Lower or
        first call it under `mesh_context()` (model code reads the mesh and rules while
        tracing); `compile_train_step` compiles it for the abstract state and batch.
        """
        step_fn = functools.partial(
            step_lib.train_step,
            graphdef=self.layout.graphdef,
            tx=self.tx,
            schedule=self.schedule,
            num_micro=self.num_micro,
            **step_lib.loss_options(self.cfg.train),
        )
        return jax.jit(
            step_fn,
            in_shardings=(self.layout.shardings, None),
            out_shardings=(self.layout.shardings, None),
            donate_argnums=(0,),
            compiler_options=self.backend.compiler_options,
        )

    def compile_train_step(self) -> tuple[jax.stages.Lowered, jax.stages.Compiled]:
        """`train_step` lowered and compiled for the abstract state and batch (nothing is
        allocated): the program the trainer runs and the planner measures."""
        with self.mesh_context():
            lowered = self.train_step.lower(self.layout.abstract, self.abstract_batch())
            return lowered, lowered.compile()

    @functools.cached_property
    def eval_step(self) -> jax.stages.Wrapped:
        """The jitted `train.step.eval_step`: `(params, batch) -> {"ce_sum", "tokens"}`, the
        parameters laid out as in the train state; compiled on its first call, which must be
        under `mesh_context()`."""
        step_fn = functools.partial(
            step_lib.eval_step,
            graphdef=self.layout.graphdef,
            loss_chunks=step_lib.loss_options(self.cfg.train)["loss_chunks"],
        )
        return jax.jit(
            step_fn,
            in_shardings=(self.layout.shardings["params"], None),
            compiler_options=self.backend.compiler_options,
        )


def setup(
    cfg: ConfigDict,
    devices: Sequence[Any] | None = None,
    *,
    check_data: bool = True,
    mesh_cfg: Mapping[str, Any] | ConfigDict | None = None,
) -> RunSetup:
    """The run of `cfg` on `devices` (default: every device of every process).

    `mesh_cfg` replaces `cfg.mesh`'s sizes (e.g. a planned multi-host mesh folded onto one
    process); `check_data=False` skips the checks that need the data files.
    """
    spec = validate(cfg, check_data)
    rules = rules_of(cfg)
    mesh = sharding.make_mesh(mesh_cfg if mesh_cfg is not None else cfg.mesh, devices)
    mesh_check.check_config_fits_mesh(cfg, spec, mesh, rules)
    if cfg.train.global_batch_size % jax.process_count():
        raise ConfigError(
            f"train.global_batch_size={cfg.train.global_batch_size} is not divisible by the "
            f"{jax.process_count()} processes; each process reads an equal share of every "
            "batch. Pick a multiple of the process count."
        )
    return _laid_out(cfg, spec, mesh, rules)


def for_reading(cfg: ConfigDict, devices: Sequence[Any] | None = None) -> RunSetup:
    """A saved run laid out on the devices here, to read its checkpoints.

    Only the model section is checked (the training settings of an old run need not pass
    today's checks, nor its data still exist); the run's own mesh is used when it fits the
    devices, else FSDP over all of them (a checkpoint restores onto any mesh).
    """
    spec = ModelSpec.from_config(cfg.model)
    rules = rules_of(cfg)
    try:
        mesh = sharding.make_mesh(cfg.mesh, devices)
    except sharding.MeshError:
        mesh = sharding.make_mesh({"ici_fsdp": -1, "dcn_data": -1}, devices)
    return _laid_out(cfg, spec, mesh, rules)


def _laid_out(
    cfg: ConfigDict, spec: ModelSpec, mesh: Mesh, rules: tuple[tuple[str, Any], ...]
) -> RunSetup:
    tx = make_optimizer(cfg.optim, cfg.train.steps)
    chosen = backend_lib.from_config(cfg.get("backend"))
    xla_options.check(dict(chosen.xla_options))
    with sharding.use_mesh(mesh, rules), backend_lib.use(chosen):
        layout = state_lib.state_layout(spec, tx, mesh, rules)
    return RunSetup(
        cfg=cfg,
        spec=spec,
        mesh=mesh,
        rules=rules,
        tx=tx,
        schedule=learning_rate_schedule(cfg.optim, cfg.train.steps),
        num_micro=cfg.train.global_batch_size // config_lib.micro_batch_size(cfg),
        layout=layout,
        backend=chosen,
    )
