"""Checks that a model, a batch and a sequence split evenly over the mesh, before compiling.

Every sharded dimension must divide by the number of shards the rule table gives it: heads and kv
heads by the tensor size, the vocabulary and the MLP width by the tensor size, the hidden size by
the FSDP size, the micro batch by data x fsdp x expert, the sequence by the context size. The
checks follow the rule preset in force, so a pure FSDP table never asks heads to divide by a
tensor size it does not use; a mixture of experts must split its experts evenly over `expert`.
A failure is a `MeshError` that shows the arithmetic and names the config keys to change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from jax.sharding import Mesh

from jaxtrain.config import micro_batch_size
from jaxtrain.models.spec import ModelSpec
from jaxtrain.sharding import MeshError, mesh_shape, rule_targets

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


def _check(key: str, value: int, what: str, logical: str, sizes: dict[str, int],
           rules: dict[str, Any], mesh_cfg: Any, rules_name: str, fix: str) -> None:
    axes = [a for a in rule_targets(rules.get(logical)) if sizes.get(a, 1) > 1]
    shards = math.prod(sizes[a] for a in axes)
    if shards <= 1 or value % shards == 0:
        return
    origin = " x ".join(_axis_origin(mesh_cfg, a, sizes[a]) for a in axes)
    preset = f"rule preset {rules_name!r}" if rules_name else "the rule table"
    raise MeshError(
        f"{key}={value} is not divisible by the {shards} shards of mesh axis "
        f"{' x '.join(repr(a) for a in axes)} ({origin}) that {preset} maps {logical!r} onto: "
        f"{value} / {shards} = {value / shards:.3g} {what} per shard. {fix}")


def check_fits_mesh(spec: ModelSpec, mesh: Mesh, rules: Sequence[tuple[str, Any]], *,
                    seq_len: int, micro_batch: int, mesh_cfg: Any = None,
                    rules_name: str = "") -> None:
    """Raises MeshError when a sharded model, batch or sequence dimension does not divide evenly.

    `mesh_cfg` (the `config.mesh` section) only makes the message name the `ici_*`/`dcn_*` keys.
    """
    sizes = mesh_shape(mesh)
    table = dict(rules)
    for key, what, logical_names in _MODEL_DIMS:
        value = int(getattr(spec, key.split(".", 1)[1]))
        for logical in logical_names:
            divisors = [d for d in range(1, value + 1) if value % d == 0]
            fix = (f"Pick mesh sizes whose product on those axes divides {value} (one of "
                   f"{divisors[:12]}{'...' if len(divisors) > 12 else ''}), or a rule preset "
                   "that does not shard this dimension (mesh.rules=fsdp leaves heads, MLP and "
                   "vocabulary whole).")
            _check(key, value, what, logical, sizes, table, mesh_cfg, rules_name, fix)
    _check("train.seq_len", seq_len, "tokens", "activation_length", sizes, table, mesh_cfg,
           rules_name, "Use a sequence length that is a multiple of the context size.")
    _check("train.micro_batch_size", micro_batch, "sequences", "activation_batch", sizes, table,
           mesh_cfg, rules_name,
           "Use a micro batch (train.micro_batch_size, or train.global_batch_size when it is "
           "0) that is a multiple of the batch shards.")


def check_config_fits_mesh(cfg: Any, spec: ModelSpec, mesh: Mesh,
                           rules: Sequence[tuple[str, Any]]) -> None:
    """`check_fits_mesh` with the sequence, micro batch and mesh keys read from a config."""
    check_fits_mesh(spec, mesh, rules, seq_len=int(cfg.train.seq_len),
                    micro_batch=micro_batch_size(cfg),
                    mesh_cfg=cfg.mesh, rules_name=str(cfg.mesh.rules))
