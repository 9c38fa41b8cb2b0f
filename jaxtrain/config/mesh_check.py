"""Checks that a model, a batch and a sequence split evenly over the mesh, before compiling.

Every sharded dimension must divide by the number of shards the rule table gives it: heads and kv
heads by the tensor size, the vocabulary and the MLP width by the tensor size, the hidden size by
the FSDP size, the micro batch by data x fsdp x expert, the sequence by the context size. The
checks follow the rule preset in force, so a pure FSDP table never asks heads to divide by a
tensor size it does not use; a mixture of experts must split its experts evenly over `expert`.
With pipeline stages the stacked blocks must split evenly into them, and the micro batch into
the pipeline's micro batches (`check_pipeline`). A failure is a `MeshError` that shows the
arithmetic and names the config keys to change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from jax.sharding import Mesh

from jaxtrain.config.loader import micro_batch_size
from jaxtrain.models.assembly.pipeline import Schedule, bubble_fraction
from jaxtrain.models.spec.block_pattern import period
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.models.spec.layer_pattern import stack_layer_indices
from jaxtrain.parallel.sharding import MeshError, mesh_shape, rule_targets, without_axis

# (what the shards hold, the logical names sharing that dimension) per checked config key.
_MODEL_DIMS = (
    ("model.num_heads", "query heads", ("heads", "activation_heads")),
    ("model.num_kv_heads", "kv heads", ("kv_heads", "activation_kv_heads")),
    ("model.vocab_size", "vocabulary rows", ("vocab", "activation_vocab")),
    ("model.intermediate_size", "MLP columns", ("mlp", "activation_mlp")),
    ("model.hidden_size", "hidden columns", ("embed", "activation_embed")),
    ("model.head_dim", "head dims", ("head_dim",)),
    # Mixture of experts (0 when dense, which divides by anything).
    ("model.num_experts", "experts", ("exp",)),
    ("model.moe_intermediate_size", "expert MLP columns", ("mlp",)),
)


def _axis_origin(mesh_cfg: Any, axis: str, size: int) -> str:
    """'mesh.ici_tensor=4 x mesh.dcn_tensor=2', a -1 shown with the size it resolved to."""
    if mesh_cfg is None:
        return f"size {size}"
    ici, dcn = int(mesh_cfg.get(f"ici_{axis}", 1)), int(mesh_cfg.get(f"dcn_{axis}", 1))
    # At most one side of an axis is a wildcard in practice; resolve it from the mesh size.
    ici_size = size // dcn if ici == -1 and dcn > 0 else ici
    dcn_size = size // ici if dcn == -1 and ici > 0 else dcn
    parts = [f"mesh.ici_{axis}={ici}" + (f" ({ici_size})" if ici == -1 else "")]
    if dcn != 1:
        parts.append(f"mesh.dcn_{axis}={dcn}" + (f" ({dcn_size})" if dcn == -1 else ""))
    return " x ".join(parts)


def _check(
    key: str,
    value: int,
    what: str,
    logical: str,
    sizes: dict[str, int],
    rules: dict[str, Any],
    mesh_cfg: Any,
    rules_name: str,
    fix: str,
) -> None:
    axes = [a for a in rule_targets(rules.get(logical)) if sizes.get(a, 1) > 1]
    shards = math.prod(sizes[a] for a in axes)
    if shards <= 1 or value % shards == 0:
        return
    origin = " x ".join(_axis_origin(mesh_cfg, a, sizes[a]) for a in axes)
    preset = f"rule preset {rules_name!r}" if rules_name else "the rule table"
    raise MeshError(
        f"{key}={value} is not divisible by the {shards} shards of mesh axis "
        f"{' x '.join(repr(a) for a in axes)} ({origin}) that {preset} maps {logical!r} onto: "
        f"{value} / {shards} = {value / shards:.3g} {what} per shard. {fix}"
    )


def _divisors(n: int) -> str:
    found = [d for d in range(1, n + 1) if n % d == 0]
    return f"{found[:12]}{'...' if len(found) > 12 else ''}"


def pipeline_units(spec: ModelSpec) -> tuple[int, str]:
    """(the units a pipeline splits into stages, what they are in words): the blocks, the
    expert blocks after leading dense ones (which run before the pipeline), or the groups of
    interleaved dense and expert blocks."""
    if spec.block_pattern:  # a unit is one repeat of the pattern's period
        every = period(spec.block_pattern)
        units = spec.num_layers // every
        return units, (
            f"{units} repeat{'' if units == 1 else 's'} of model.block_pattern's {every}-sublayer "
            f"period {spec.block_pattern[:every]!r}"
        )
    units = len(stack_layer_indices(spec)["layers"])
    if spec.num_experts and spec.moe_layer_step > 1:
        return units, (
            f"{units} groups of model.moe_layer_step={spec.moe_layer_step} blocks "
            f"(model.num_layers={spec.num_layers})"
        )
    if units != spec.num_layers:
        return units, (
            f"{units} expert blocks (model.num_layers={spec.num_layers} less the "
            f"{spec.num_layers - units} leading dense blocks, which run before the "
            "pipeline)"
        )
    return units, f"model.num_layers={units} blocks"


def check_stages(spec: ModelSpec, stages: int, schedule: Schedule, mesh_cfg: Any = None) -> None:
    """Raises MeshError unless the stack splits evenly into the `pipeline` stages (times the
    repeats)."""
    if stages <= 1:
        return
    origin = _axis_origin(mesh_cfg, "pipeline", stages)
    units, what = pipeline_units(spec)
    parts, repeats = stages * schedule.repeats, schedule.repeats
    times = f" x train.pipeline_repeats={repeats} = {parts} parts" if repeats > 1 else ""
    if units % parts:
        raise MeshError(
            f"The {what} do not split into the {stages} pipeline stages ({origin}){times}: "
            f"{units} / {parts} = {units / parts:.3g} per {'part' if repeats > 1 else 'stage'}. "
            f"Each stage holds an equal, contiguous run of the stack, so pick a pipeline size "
            f"(times train.pipeline_repeats) that divides {units} (one of {_divisors(units)}), "
            "or no pipeline (mesh.ici_pipeline=1, mesh.dcn_pipeline=1)."
        )


def check_pipeline_batch(
    sizes: dict[str, int], rules: dict[str, Any], *, micro_batch: int, schedule: Schedule
) -> None:
    """Raises MeshError unless the micro batch splits into the pipeline's micro batches, each
    divisible by the batch shards inside the pipeline (and, with repeats, at least one micro
    batch per stage)."""
    stages = sizes.get("pipeline", 1)
    if stages <= 1:
        return
    repeats = schedule.repeats
    batch_axes = _inner_batch_axes(sizes, rules)
    shards = math.prod(sizes[a] for a in batch_axes)
    if micro_batch % (shards * stages):
        raise MeshError(
            f"The micro batch of {micro_batch} sequences (train.micro_batch_size, or "
            f"train.global_batch_size when it is 0) does not split over the {stages} pipeline "
            f"stages x {shards} batch shards: outside the pipelined stack (embedding, output "
            "layer, loss) the stages split the batch like data parallelism. Use a micro batch "
            f"that is a multiple of {shards * stages}."
        )
    micro = schedule.micro(stages, micro_batch, shards)
    key = f"train.pipeline_microbatches={schedule.microbatches}"
    if not schedule.microbatches:
        key += f" (chose {micro})"
    if micro_batch % micro:
        raise MeshError(
            f"{key} does not divide the micro batch of {micro_batch} sequences "
            f"(train.micro_batch_size, or train.global_batch_size when it is 0): "
            f"{micro_batch} / {micro} = {micro_batch / micro:.3g}. Pick a divisor of "
            f"{micro_batch} (one of {_divisors(micro_batch)}), or 0 to let jaxtrain choose."
        )
    if (micro_batch // micro) % shards:
        names = " x ".join(repr(a) for a in batch_axes)
        raise MeshError(
            f"{key} leaves {micro_batch // micro} sequences per pipeline micro batch "
            f"({micro_batch} / {micro}), not divisible by the {shards} batch shards of mesh "
            f"axis {names} inside the pipeline. Use fewer pipeline micro batches or a larger "
            f"micro batch: it needs a multiple of {shards} sequences per pipeline micro batch."
        )
    if repeats > 1 and micro < stages:
        raise MeshError(
            f"train.pipeline_repeats={repeats} sends each micro batch round the {stages} stages "
            f"again, which needs at least as many pipeline micro batches as stages, but {key} "
            f"gives {micro}. Raise train.pipeline_microbatches to {stages} or more (the micro "
            "batch must hold that many times the batch shards), or use "
            "train.pipeline_repeats=1."
        )


def _inner_batch_axes(sizes: dict[str, int], rules: dict[str, Any]) -> list[str]:
    """The mesh axes (of size > 1) that split the batch inside the pipeline's stages."""
    inner = dict(without_axis(rules, "pipeline"))
    return [a for a in rule_targets(inner.get("activation_batch")) if sizes.get(a, 1) > 1]


def pipeline_summary(
    spec: ModelSpec,
    sizes: dict[str, int],
    rules: dict[str, Any],
    *,
    micro_batch: int,
    schedule: Schedule,
    mesh_cfg: Any = None,
) -> dict[str, Any] | str:
    """Stages, blocks per stage, micro batches and the bubble of a pipelined run (for
    `config` and the planner), or 'does not fit: <the check's message>'."""
    stages = sizes.get("pipeline", 1)
    try:
        check_stages(spec, stages, schedule, mesh_cfg)
        check_pipeline_batch(sizes, rules, micro_batch=micro_batch, schedule=schedule)
    except MeshError as e:
        return f"does not fit: {e}"
    units, what = pipeline_units(spec)
    shards = math.prod(sizes[a] for a in _inner_batch_axes(sizes, rules))
    micro = schedule.micro(stages, micro_batch, shards)
    return {
        "stages": stages,
        "blocks_per_stage": f"{units // stages} of the {what}",
        "repeats": schedule.repeats,
        "micro_batches": micro,
        "sequences_per_micro_batch": micro_batch // micro,
        "bubble_fraction": round(bubble_fraction(stages, micro, schedule.repeats), 4),
    }


def check_fits_mesh(
    spec: ModelSpec,
    mesh: Mesh,
    rules: Sequence[tuple[str, Any]],
    *,
    seq_len: int,
    micro_batch: int,
    mesh_cfg: Any = None,
    rules_name: str = "",
    schedule: Schedule | None = None,
) -> None:
    """Raises MeshError when a sharded model, batch or sequence dimension does not divide evenly.

    `mesh_cfg` (the `config.mesh` section) only makes the message name the `ici_*`/`dcn_*` keys;
    `schedule` is the pipeline's (the default one when None).
    """
    check_sizes_fit(
        spec,
        mesh_shape(mesh),
        rules,
        seq_len=seq_len,
        micro_batch=micro_batch,
        mesh_cfg=mesh_cfg,
        rules_name=rules_name,
        schedule=schedule,
    )


def check_sizes_fit(
    spec: ModelSpec,
    sizes: dict[str, int],
    rules: Sequence[tuple[str, Any]],
    *,
    seq_len: int,
    micro_batch: int,
    mesh_cfg: Any = None,
    rules_name: str = "",
    schedule: Schedule | None = None,
) -> None:
    """`check_fits_mesh` on mesh axis sizes alone: the planner checks meshes of any device
    count without building them."""
    table = dict(rules)
    schedule = schedule or Schedule()
    check_stages(spec, sizes.get("pipeline", 1), schedule, mesh_cfg)
    for key, what, logical_names in _MODEL_DIMS:
        value = int(getattr(spec, key.split(".", 1)[1]))
        for logical in logical_names:
            divisors = [d for d in range(1, value + 1) if value % d == 0]
            fix = (
                f"Pick mesh sizes whose product on those axes divides {value} (one of "
                f"{divisors[:12]}{'...' if len(divisors) > 12 else ''}), or a rule preset "
                "that does not shard this dimension (mesh.rules=fsdp leaves heads, MLP and "
                "vocabulary whole)."
            )
            _check(key, value, what, logical, sizes, table, mesh_cfg, rules_name, fix)
    _check(
        "train.seq_len",
        seq_len,
        "tokens",
        "activation_length",
        sizes,
        table,
        mesh_cfg,
        rules_name,
        "Use a sequence length that is a multiple of the context size.",
    )
    _check(
        "train.micro_batch_size",
        micro_batch,
        "sequences",
        "activation_batch",
        sizes,
        table,
        mesh_cfg,
        rules_name,
        "Use a micro batch (train.micro_batch_size, or train.global_batch_size when it is "
        "0) that is a multiple of the batch shards.",
    )
    check_pipeline_batch(sizes, table, micro_batch=micro_batch, schedule=schedule)


def check_config_fits_mesh(
    cfg: Any, spec: ModelSpec, mesh: Mesh, rules: Sequence[tuple[str, Any]]
) -> None:
    """`check_fits_mesh` with the sequence, micro batch and mesh keys read from a config."""
    check_fits_mesh(
        spec,
        mesh,
        rules,
        seq_len=int(cfg.train.seq_len),
        micro_batch=micro_batch_size(cfg),
        mesh_cfg=cfg.mesh,
        rules_name=str(cfg.mesh.rules),
        schedule=pipeline_schedule(cfg),
    )


def pipeline_schedule(cfg: Any) -> Schedule:
    """The pipeline schedule `cfg.train` asks for (configs saved before it: the default)."""
    return Schedule(
        microbatches=int(cfg.train.get("pipeline_microbatches", 0)),
        repeats=int(cfg.train.get("pipeline_repeats", 1)),
    )
