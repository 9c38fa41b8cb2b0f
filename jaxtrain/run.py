"""The one way a run is set up from its config, shared by everything that runs or plans one.

    setup = run.setup(cfg)            # validated, mesh and rules checked, state laid out
    setup.layout.abstract             # the train state's shapes and shardings, nothing allocated
    setup.abstract_batch()            # the global batch the step is compiled for

The order: every setting (`config.validate`) and the data settings (`data.sources`), the mesh
from the `ici_*`/`dcn_*` sizes and the rule table, the model and batch checked against them
(uneven shards fail late inside XLA, so they are refused here with the key to change), the
optimizer and its schedule, and the abstract train state with its shardings. The trainer, the
compile-only planner (`compile_plan`), checkpoint inspection and export (`runs`,
`checkpoint_listing`) and the benchmarks start from it, so they all see the same run.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import optax
from jax.sharding import Mesh, NamedSharding
from ml_collections import ConfigDict

from jaxtrain.config import loader as config_lib
from jaxtrain.config import mesh_check
from jaxtrain.data import pipeline
from jaxtrain.data.sources import validate_data_config
from jaxtrain.errors import ConfigError
from jaxtrain.hardware import backend as backend_lib
from jaxtrain.models.assembly import pipeline as pipeline_lib
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.parallel import sharding
from jaxtrain.train import state as state_lib
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

    @property
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
            f"train.global_batch_size={cfg.train.global_batch_size} is not "
            f"divisible by the {jax.process_count()} processes."
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
