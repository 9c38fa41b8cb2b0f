"""Device mesh from `ici_*`/`dcn_*` sizes, the logical-axis rule table, and shardings from it.

Model code names logical axes only (`embed`, `heads`, `activation_batch`, ...). One table maps
each logical name to a mesh axis (or None: replicated). Mesh axes of size 1 shard nothing, so one
table serves data parallel, FSDP and tensor parallel runs; the sizes pick the strategy.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtrain import trace_context
from jaxtrain.errors import JaxtrainError

# Slowest-changing first: `data` spans hosts best, `tensor` needs the fastest links. `pipeline`
# passes one activation per micro batch between neighbouring stages, so it crosses hosts well too.
MESH_AXES = ("data", "pipeline", "fsdp", "context", "expert", "tensor")

# Every logical name that model code uses, mapped to mesh axes.
RULE_PRESETS: dict[str, tuple[tuple[str, Any], ...]] = {
    # Parameters, gradients and optimizer state sharded over `fsdp` (ZeRO-3), Megatron-style
    # column/row splits over `tensor`; batch over data x fsdp, sequence over context.
    "fsdp_tensor": (
        # Outside the pipelined stack (embedding, output, loss, leading dense blocks) `pipeline`
        # splits the batch like `data`; inside it the stages take that axis (models/pipeline.py).
        # Last, so that each device's rows of a pipeline micro batch are those of its
        # `pipeline` neighbours: entering the pipeline is one all-gather over that axis.
        ("activation_batch", ("data", "fsdp", "expert", "pipeline")),
        ("activation_length", "context"),
        ("activation_embed", None),
        ("activation_heads", "tensor"),
        ("activation_kv_heads", "tensor"),
        ("activation_mlp", "tensor"),
        ("activation_vocab", "tensor"),
        ("vocab", "tensor"),
        ("embed", "fsdp"),
        ("heads", "tensor"),
        ("kv_heads", "tensor"),
        ("head_dim", None),
        # Multi-head latent attention's compressed q / kv latents: small, kept whole.
        ("latent", None),
        ("mlp", "tensor"),
        # Mixture-of-experts weights split by expert (expert parallelism); the batch is also
        # split over `expert`, so the axis acts as data parallel outside the expert layers.
        ("exp", "expert"),
        ("norm", None),
        # Mamba mixers (models/mamba2.py, mamba.py): the fused (z, x, B, C, dt) projection,
        # convolution channels, per-head and inner-channel vectors, and small state / dt-rank /
        # kernel dims stay whole on `tensor` (their concatenated layout does not split into
        # head-aligned column blocks); `embed` still shards the projections over `fsdp`.
        ("ssm_proj", None),
        ("ssm_conv", None),
        ("ssm_heads", None),
        ("ssm_inner", None),
        ("ssm_state", None),
        # Stacked blocks are split into pipeline stages: stage s holds a contiguous run of them.
        ("layers", "pipeline"),
        # Blocks that run before the pipelined stack (DeepSeek's leading dense blocks): whole on
        # every stage.
        ("prefix_layers", None),
    ),
}
# Pure FSDP: the same table with nothing on `tensor` (a tensor size > 1 would then only replicate).
RULE_PRESETS["fsdp"] = tuple(
    (name, None if axis == "tensor" else axis) for name, axis in RULE_PRESETS["fsdp_tensor"]
)
# Data parallel: parameters replicated (but for the pipeline's stages), batch split over every
# data-like axis.
RULE_PRESETS["data"] = tuple(
    (name, axis if name in ("activation_batch", "layers") else None)
    for name, axis in RULE_PRESETS["fsdp_tensor"]
)


class MeshError(JaxtrainError, ValueError):
    """A mesh that does not fit the devices; the message shows the arithmetic."""


def _fill(sizes: dict[str, int], total: int, side: str) -> dict[str, int]:
    sizes = dict(sizes)
    wild = [k for k, v in sizes.items() if v == -1]
    if len(wild) > 1:
        raise MeshError(f"mesh.{side}_*: only one axis may be -1, got {wild}.")
    known = math.prod(v for v in sizes.values() if v != -1)
    unit = "devices per host" if side == "ici" else "hosts (processes)"
    if wild:
        if total % known:
            raise MeshError(
                f"mesh.{side}_*: {total} {unit} are not divisible by the product "
                f"of the fixed sizes {known} ({_show(sizes)})."
            )
        sizes[wild[0]] = total // known
    if math.prod(sizes.values()) != total:
        raise MeshError(
            f"mesh.{side}_* sizes multiply to {math.prod(sizes.values())} "
            f"({_show(sizes)}) but there are {total} {unit} on that side; make the "
            "product equal or set one axis to -1."
        )
    return sizes


def _fit(mesh_cfg: Any, num_devices: int, num_slices: int) -> tuple[dict[str, int], dict[str, int]]:
    """(ici, dcn) sizes with the -1s filled; a MeshError also says what the launch gave.

    A mesh written for more hosts than were started is the usual cause, so the error names the
    launcher settings that set the host count.
    """
    per_host = num_devices // max(num_slices, 1)
    sides = {s: {a: int(mesh_cfg.get(f"{s}_{a}", 1)) for a in MESH_AXES} for s in ("ici", "dcn")}
    try:
        dcn = _fill(sides["dcn"], num_slices, "dcn")
        ici = _fill(sides["ici"], per_host, "ici")
    except MeshError as e:

        def need(side: str) -> str:
            fixed = math.prod(v for v in sides[side].values() if v != -1)
            if -1 not in sides[side].values():
                return str(fixed)
            return "any number of" if fixed == 1 else f"a multiple of {fixed}"

        raise MeshError(
            f"{e} This launch has {num_slices} process(es) (hosts) x {per_host} devices per host "
            f"= {num_devices} devices. The number of hosts is the launcher's process count: "
            "NNODES for Primus' launcher, srun --nodes, torchrun --nnodes or --num-processes; "
            "the devices are hosts x devices per host, and this mesh needs "
            f"{need('dcn')} host(s) (mesh.dcn_*) with {need('ici')} devices each (mesh.ici_*)."
        ) from None
    return ici, dcn


def _show(sizes: dict[str, int]) -> str:
    return " x ".join(f"{k}={v}" for k, v in sizes.items())


def resolved_sizes(
    mesh_cfg: Any, num_devices: int, num_slices: int = 1
) -> tuple[dict[str, int], dict[str, int]]:
    """(ici, dcn) size of every mesh axis with the -1 wildcards filled, as `make_mesh` does."""
    return _fit(mesh_cfg, num_devices, num_slices)


def make_mesh(mesh_cfg: Any, devices: Sequence[Any] | None = None) -> Mesh:
    """Builds the mesh from `config.mesh` (`ici_<axis>` and `dcn_<axis>` for each mesh axis).

    `dcn_*` sizes multiply to the number of processes (hosts or slices); `ici_*` sizes to the
    devices in each. Across processes the fast axes stay inside a host.
    """
    num_slices = jax.process_count() if devices is None else 1
    devices = list(devices if devices is not None else jax.devices())
    ici, dcn = _fit(mesh_cfg, len(devices), num_slices)
    ici_shape = [ici[a] for a in MESH_AXES]
    dcn_shape = [dcn[a] for a in MESH_AXES]
    if num_slices > 1:
        device_array = mesh_utils.create_hybrid_device_mesh(
            ici_shape, dcn_shape, devices, process_is_granule=True
        )
    else:
        try:
            device_array = mesh_utils.create_device_mesh(ici_shape, devices)
        except (ValueError, NotImplementedError, AssertionError):
            device_array = np.asarray(devices).reshape(ici_shape)
    return Mesh(device_array, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES))


def mesh_shape(mesh: Mesh) -> dict[str, int]:
    """{axis: size} of the mesh, in mesh order."""
    return dict(zip(mesh.axis_names, mesh.devices.shape))


@contextlib.contextmanager
def use_mesh(mesh: Mesh, rules: Sequence[tuple[str, Any]]) -> Iterator[None]:
    """Makes `constrain` and `logical_spec` use this mesh and rule table while tracing."""
    with trace_context.use(mesh=mesh, rules=dict(rules)):
        yield


def active_mesh() -> tuple[Mesh, dict[str, Any]] | None:
    """The (mesh, rule table) `use_mesh` put in force, or None outside it."""
    context = trace_context.current()
    return None if context.mesh is None else (context.mesh, context.rules)


def axis_size(axis: str) -> int:
    """The size of a mesh axis of the active mesh (1 outside `use_mesh`)."""
    active = active_mesh()
    return mesh_shape(active[0]).get(axis, 1) if active else 1


def without_axis(
    rules: Sequence[tuple[str, Any]] | dict[str, Any], axis: str
) -> tuple[tuple[str, Any], ...]:
    """The rule table with one mesh axis taken out of every rule (inside pipeline stages the
    stage dimension holds `pipeline`, so the batch must not)."""

    def drop(rule: Any) -> Any:
        kept = tuple(t for t in rule_targets(rule) if t != axis)
        return kept[0] if len(kept) == 1 else (kept or None)

    items = rules.items() if isinstance(rules, dict) else rules
    return tuple((name, drop(rule)) for name, rule in items)


def rule_targets(rule: Any) -> tuple[str, ...]:
    """The mesh axes a rule-table or PartitionSpec entry names: one axis, several, or none
    (None)."""
    return (rule,) if isinstance(rule, str) else tuple(rule or ())


def logical_spec(axes: Sequence[str | None], rules: dict[str, Any]) -> PartitionSpec:
    """PartitionSpec for logical axis names; a name missing from the table is an error."""
    mesh_axes = []
    used: set[str] = set()
    for name in axes:
        if name is None:
            mesh_axes.append(None)
            continue
        if name not in rules:
            raise KeyError(
                f"logical axis {name!r} has no entry in the sharding rule table; "
                f"add ({name!r}, <mesh axis or None>) to the rules."
            )
        # A mesh axis may shard only one dimension of an array.
        targets = tuple(t for t in rule_targets(rules[name]) if t not in used)
        used.update(targets)
        mesh_axes.append(targets[0] if len(targets) == 1 else (targets or None))
    return PartitionSpec(*mesh_axes)


def logical_size(name: str) -> int:
    """How many shards the active rules split a logical axis into (1 outside `use_mesh`)."""
    active = active_mesh()
    if active is None:
        return 1
    mesh, rules = active
    return int(np.prod([mesh_shape(mesh)[t] for t in rule_targets(rules.get(name))] or [1]))


def constrain(x: jax.Array, axes: Sequence[str | None]) -> jax.Array:
    """Pins an activation's sharding by logical names, so XLA does not have to guess."""
    active = active_mesh()
    if active is None:
        return x
    mesh, rules = active
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, logical_spec(axes, rules)))


def param_logical_axes(abstract_state: Any) -> Any:
    """The logical axes of every parameter, the stack's axis (`layers`, or the variable's
    `stack_axis` metadata) prepended for layer-stacked ones."""
    from flax import nnx

    def axes_of(var: Any) -> tuple[str, ...]:
        axes = tuple(getattr(var, "logical_axes", ()) or ())
        extra = var.value.ndim - len(axes) if hasattr(var, "value") else 0
        return (var.get_metadata().get("stack_axis", "layers"),) * extra + axes

    return jax.tree.map(axes_of, abstract_state, is_leaf=lambda v: isinstance(v, nnx.Variable))


def shardings_for(logical_tree: Any, mesh: Mesh, rules: Sequence[tuple[str, Any]]) -> Any:
    """NamedShardings for a tree of logical-axis tuples."""
    table = dict(rules)
    return jax.tree.map(
        lambda axes: NamedSharding(mesh, logical_spec(axes, table)),
        logical_tree,
        is_leaf=lambda x: isinstance(x, tuple),
    )
