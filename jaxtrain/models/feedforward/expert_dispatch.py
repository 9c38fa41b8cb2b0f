"""Where the dropless experts run: every device routes its own tokens.

The experts sort a layer's token assignments by expert (`moe.MoE`). Left to XLA, that sort
over a batch-sharded array gathers every token onto every device, so each device ran the whole
batch through the experts: data parallelism did not split the expert work at all, and an
`expert` axis all-reduced every token's output. Under `shard_map` each device sorts and runs
only the tokens it holds:

- weight dimensions split only to save memory (`embed` over `fsdp`) are all-gathered for the
  layer, as the dense layers' are, and their gradients reduce-scatter back;
- `mlp` split over `tensor`: each device computes its columns of the gate and up projections
  and its rows of the down projection; the outputs are summed over `tensor` (Megatron's
  column / row split);
- `exp` split over `expert`: the devices along `expert` gather each other's tokens, each runs
  them through its own experts only, and the outputs are reduce-scattered back to the devices
  that hold the tokens (Megatron's all-gather token dispatcher). Every assignment is computed
  once, on the device that holds its expert.

The arithmetic of every row is the one a single device does, so the losses match a run
without a mesh. Rules this cannot honour (the embedding dimension of activations sharded, or
`mlp` on an axis that also splits tokens or experts) fall back to the global sort.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from jaxtrain.parallel import sharding

# local_fn(x_BLD, experts_BLK, weights_BLK, params, first_expert) -> (routed output y_BLD,
# count): the experts over the tokens given, with `params` holding the experts first_expert,
# first_expert+1, ...; `count` a float32 scalar (the assignments dropped by a capacity) that
# is summed over every device's tokens and experts.
LocalExperts = Callable[
    [jax.Array, jax.Array, jax.Array, dict[str, jax.Array], Any], tuple[jax.Array, jax.Array]
]

TOKEN_AXES = ("activation_batch", "activation_length", "activation_embed")


def _axes(entry: Any) -> tuple[str, ...]:
    """The mesh axes a PartitionSpec entry names."""
    return sharding.rule_targets(entry)


def _live_spec(names: tuple[str | None, ...], rules: dict, sizes: dict) -> PartitionSpec:
    """The PartitionSpec of logical `names` without mesh axes of size 1: they split nothing,
    and an axis named in a spec would need its collective in the body, a copy on every device.
    """
    spec = sharding.logical_spec(names, rules)
    live = [tuple(a for a in _axes(entry) if sizes[a] > 1) for entry in spec]
    return PartitionSpec(*(axes[0] if len(axes) == 1 else (axes or None) for axes in live))


def per_device_tokens(
    fn: Callable[..., Any], tokens: tuple[jax.Array, ...], whole: tuple[jax.Array, ...] = ()
) -> Any:
    """`fn(*tokens, *whole)` on each device's own tokens, for a `fn` that treats every token
    on its own (the router: XLA does not split `top_k` over the batch, and would gather every
    token's router logits onto every device). Arrays in `tokens` and every output lead with
    [B, L]; arrays in `whole` reach every device whole."""
    active = sharding.active_mesh()
    if active is None:
        return fn(*tokens, *whole)
    mesh, rules = active
    lead = tuple(_live_spec(TOKEN_AXES[:2], rules, sharding.mesh_shape(mesh)))
    if lead == (None, None):
        return fn(*tokens, *whole)

    def spec(a: Any) -> PartitionSpec:
        return PartitionSpec(*lead, *(None,) * (len(a.shape) - 2))

    return jax.shard_map(
        fn,
        mesh=mesh,
        in_specs=tuple(spec(a) for a in tokens) + (PartitionSpec(),) * len(whole),
        out_specs=jax.tree.map(spec, jax.eval_shape(fn, *tokens, *whole)),
    )(*tokens, *whole)


def on_own_tokens(
    local_fn: LocalExperts,
    x_BLD: jax.Array,
    experts_BLK: jax.Array,
    weights_BLK: jax.Array,
    params: dict[str, jax.Array],
    param_axes: dict[str, tuple[str, ...]],
    counted: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """`local_fn` on each device's own tokens (see the module docstring); on the whole batch at
    once outside a mesh, or where the rules leave nothing to split. Returns (y_BLD, count), the
    count summed over all devices when `counted`, else 0."""
    active = sharding.active_mesh()
    if active is None:
        return local_fn(x_BLD, experts_BLK, weights_BLK, params, 0)
    mesh, rules = active
    sizes = sharding.mesh_shape(mesh)
    token_spec = _live_spec(TOKEN_AXES, rules, sizes)
    route_spec = PartitionSpec(token_spec[0], token_spec[1], None)
    token_axes = _axes(token_spec[0]) + _axes(token_spec[1])
    param_specs = {n: _live_spec(param_axes[n], rules, sizes) for n in params}
    expert_axes = _axes(_live_spec(("exp",), rules, sizes)[0])
    mlp_axes = _axes(_live_spec(("mlp",), rules, sizes)[0])
    # Per parameter and dimension, the axes to gather: all but the expert and mlp splits.
    gathers = {
        n: [
            () if name in ("exp", "mlp") else _axes(entry)
            for name, entry in zip(param_axes[n], param_specs[n])
        ]
        for n in params
    }
    splits_anything = token_axes or expert_axes or mlp_axes or any(any(g) for g in gathers.values())
    honourable = not token_spec[2] and not (set(mlp_axes) & (set(token_axes) | set(expert_axes)))
    if not splits_anything or not honourable:
        return local_fn(x_BLD, experts_BLK, weights_BLK, params, 0)

    # Tokens differ along these expert axes (the batch is split over them too): gather them.
    token_expert_axes = tuple(a for a in token_axes if a in expert_axes)
    # Tokens are the same along these: each device adds its experts' part, then all sum.
    summed_axes = mlp_axes + tuple(a for a in expert_axes if a not in token_expert_axes)

    def body(x, experts, weights, shards):
        full = {}
        for name, w in shards.items():
            for dim, axes in enumerate(gathers[name]):
                if axes:
                    w = jax.lax.all_gather(w, axes, axis=dim, tiled=True)
            full[name] = w
        if token_expert_axes:
            x, experts, weights = (
                jax.lax.all_gather(a, token_expert_axes, axis=0, tiled=True)
                for a in (x, experts, weights)
            )
        first = 0
        if expert_axes:
            first = jax.lax.axis_index(expert_axes) * full["up_proj"].shape[0]
        if mlp_axes and "down_bias" in full:  # added once, not once per `tensor` shard
            keep = jax.lax.axis_index(mlp_axes) == 0
            full["down_bias"] = jnp.where(keep, full["down_bias"], 0)
        y, count = local_fn(x, experts, weights, full, first)
        if token_expert_axes:
            y = jax.lax.psum_scatter(y, token_expert_axes, scatter_dimension=0, tiled=True)
        if summed_axes:
            y = jax.lax.psum(y, summed_axes)
        if not counted:
            return y, jnp.float32(0.0)
        # Every device counted its own tokens' assignments to its own experts; `mlp` splits
        # neither, so its devices counted the same ones.
        counters = tuple(dict.fromkeys(token_axes + expert_axes))
        return y, jax.lax.psum(count, counters) if counters else count

    return jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(token_spec, route_spec, route_spec, param_specs),
        out_specs=(token_spec, PartitionSpec()),
    )(x_BLD, experts_BLK, weights_BLK, params)
