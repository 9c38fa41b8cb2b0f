"""Pipeline parallelism: a scanned block stack split into stages over the `pipeline` mesh axis.

Shape letters: S stages, R repeats (virtual stages per device), K units per stage and repeat,
U units in the stack (R x S x K), M micro batches, B rows of the batch, b rows of a micro batch
(B / M), L length, D embed, T iterations (R x M + S - 1).

A unit is what one step of the decoder's scan runs: one block, or one group of dense and expert
blocks (Llama 4). The stack's parameters keep their checkpoint layout, [U, ...] with U split
into S contiguous runs over `pipeline` (the `layers` rule), so a checkpoint does not depend on
the stage count. Seen as [R, S, K, ...], stage s at repeat r runs units (r S + s) K .. + K - 1:
with one repeat that is exactly the stage's own run; with R > 1 (the circular schedule, a
micro batch passing every stage R times) the units are reshuffled once per step to that order.

Every iteration each stage runs its K units on one micro batch, under `jax.vmap` over the stage
dimension (sharded over `pipeline`, so each device computes only its stage), then the outputs
move one stage on with a collective permute. Stage 0 takes a fresh micro batch for the first M
iterations and, with R > 1, the last stage's output of M iterations before. Micro batch m
reaches stage s at repeat r on iteration r M + m + s; the S - 1 iterations in which a stage has
no micro batch are the bubble, (S - 1) / (R M + S - 1) of the time. The backward pass is the
same schedule run in reverse by autodiff.

Router statistics of a mixture of experts are averaged over the micro batches, per unit, as
means over tokens; the load-balancing loss is formed from those means, so it equals the loss of
the unsplit batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from jaxtrain import trace_context
from jaxtrain.models.feedforward.moe import balance_loss_of_means
from jaxtrain.models.layers import fp8
from jaxtrain.parallel import sharding

AXIS = "pipeline"
_ACTIVATION = ("activation_batch", "activation_length", "activation_embed")


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How micro batches flow through the stages (`train.pipeline_microbatches`,
    `train.pipeline_repeats`)."""

    microbatches: int = 0  # micro batches per forward pass; 0: `default_microbatches`
    repeats: int = 1  # times a micro batch passes every stage (virtual stages per device)

    def micro(self, stages: int, rows: int, shards: int) -> int:
        """The number of micro batches for `stages` stages and a batch of `rows` rows split
        over `shards` devices inside the pipeline."""
        return self.microbatches or default_microbatches(stages, rows, shards, self.repeats)


def default_microbatches(stages: int, rows: int, shards: int, repeats: int = 1) -> int:
    """The most micro batches, up to 4 x stages, that split `rows` evenly with every part
    still divisible by the `shards` of the batch (at least `stages` with repeats); 1 when
    none does. Four per stage keeps the idle share under 20%, and each part big enough to
    keep the device busy."""
    fits = [
        m
        for m in range(1, 4 * stages + 1)
        if rows % m == 0 and (rows // m) % shards == 0 and (repeats == 1 or m >= stages)
    ]
    return max(fits, default=1)


@contextlib.contextmanager
def use(schedule: Schedule) -> Iterator[None]:
    """Makes the decoder pipeline with this schedule while tracing (on a mesh whose `pipeline`
    axis is larger than 1)."""
    with trace_context.use(pipeline_schedule=schedule):
        yield


def current() -> Schedule:
    """The schedule in force (the default outside `use`)."""
    return trace_context.current().pipeline_schedule or Schedule()


def iterations(stages: int, microbatches: int, repeats: int = 1) -> int:
    """Loop iterations of one forward pass: R x M + S - 1."""
    return repeats * microbatches + stages - 1


def bubble_fraction(stages: int, microbatches: int, repeats: int = 1) -> float:
    """Share of the iterations a stage is idle: (S - 1) / (R x M + S - 1)."""
    return (stages - 1) / iterations(stages, microbatches, repeats)


def split_rows(x_B: jax.Array, microbatches: int) -> jax.Array:
    """[B, ...] -> [M, B / M, ...], rows j, j + M, ... in micro batch j, so each device keeps
    its own rows (the batch is split over devices in contiguous blocks)."""
    x = x_B.reshape(x_B.shape[0] // microbatches, microbatches, *x_B.shape[1:])
    return jnp.swapaxes(x, 0, 1)


def merge_rows(x_M: jax.Array) -> jax.Array:
    """The inverse of `split_rows`."""
    x = jnp.swapaxes(x_M, 0, 1)
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def run(
    unit_fn: Callable[[jax.Array, Any, Any], tuple[jax.Array, Any]],
    units: Any,
    x_BLD: jax.Array,
    rows: Any,
    *,
    remat: Callable | None = None,
    unroll: int | bool = 1,
) -> tuple[jax.Array, Any]:
    """Runs the stack's U units over x, pipelined over the active mesh's `pipeline` axis.

    `unit_fn(x_bLD, unit, rows_b) -> (x_bLD, stats)` applies one unit (`units` leaves are
    [U, ...]; `rows` leaves [B, ...] are per-row inputs such as segment ids). `remat` wraps the
    unit (jax.checkpoint with the model's policy); `unroll` unrolls both loops (the units of a
    stage and the iterations) as `jax.lax.scan` does. Returns (x [B, L, D], stats with a leading
    [U] dimension, each the mean over the micro batches; with router statistics, `aux_loss`
    is the load-balancing loss formed from those means).

    fp8 amax histories (`Fp8Amax` variables in `units`, `jaxtrain.models.layers.fp8`) have as their
    "gradient" their new value rather than a derivative. A unit runs in many iterations, and
    autodiff would sum what each returns; those leaves instead get one copy per iteration
    (`_copies_combined_by_max`), so the iterations' new histories combine by maximum, as micro
    batches of gradient accumulation do.
    """
    mesh, outer = sharding.active_mesh()
    stages = sharding.axis_size(AXIS)
    inner = sharding.without_axis(outer, AXIS)
    schedule = current()
    with sharding.use_mesh(mesh, inner):
        shards = sharding.logical_size("activation_batch")
    micro, repeats = schedule.micro(stages, x_BLD.shape[0], shards), schedule.repeats
    units_total = jax.tree.leaves(units)[0].shape[0]
    per_stage = units_total // (stages * repeats)
    total = iterations(stages, micro, repeats)
    stage_spec = PartitionSpec(AXIS, *sharding.logical_spec(_ACTIVATION, dict(inner)))

    def on_stages(x: jax.Array, dim: int = 0) -> jax.Array:
        # Only the stage dimension is pinned; the others keep what the rules gave them.
        spec = [PartitionSpec.UNCONSTRAINED] * x.ndim
        spec[dim] = AXIS
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, PartitionSpec(*spec)))

    with sharding.use_mesh(mesh, inner):
        x_MbLD = sharding.constrain(split_rows(x_BLD, micro), (None, *_ACTIVATION))
    rows_M = jax.tree.map(lambda r: split_rows(r, micro), rows)
    # [U, ...] -> [R, S, K, ...]: model order is (r, s, k), stage s holds [:, s].
    weights = jax.tree.map(
        lambda w: on_stages(w.reshape(repeats, stages, per_stage, *w.shape[1:]), 1), units
    )

    newest = jax.tree.map(
        lambda v: isinstance(v, fp8.Fp8Amax), units, is_leaf=lambda v: isinstance(v, nnx.Variable)
    )
    flags = jax.tree.leaves(
        jax.tree.map(lambda flag, sub: jax.tree.map(lambda _: flag, sub), newest, units)
    )
    leaves, treedef = jax.tree.flatten(weights)
    copies = [_copies_combined_by_max(w, total) for w, flag in zip(leaves, flags) if flag]

    def weights_at(copies_t: list[jax.Array]) -> Any:
        given = iter(copies_t)
        return treedef.unflatten([next(given) if flag else w for w, flag in zip(leaves, flags)])

    body = remat(unit_fn) if remat is not None else unit_fn

    def stage_fn(w_K: Any, x_bLD: jax.Array, rows_b: Any) -> tuple[jax.Array, Any]:
        return jax.lax.scan(lambda x, w: body(x, w, rows_b), x_bLD, w_K, unroll=unroll)

    stage_ids = jnp.arange(stages)

    def rotate(x_S: jax.Array) -> jax.Array:
        # Stage s's output becomes stage s + 1's input (the last stage's, stage 0's).
        perm = [(i, (i + 1) % stages) for i in range(stages)]
        return jax.shard_map(
            lambda x: jax.lax.ppermute(x, AXIS, perm),
            mesh=mesh,
            in_specs=stage_spec,
            out_specs=stage_spec,
        )(x_S)

    def iteration(carry: dict[str, jax.Array], xs: tuple[jax.Array, list[jax.Array]]):
        t, copies_t = xs
        done_S = t - stage_ids  # micro batches each stage has taken so far
        valid_S = (done_S >= 0) & (done_S < repeats * micro)
        micro_S = jnp.mod(done_S, micro)
        repeat_S = jnp.clip(done_S // micro, 0, repeats - 1)
        fresh = jax.lax.dynamic_index_in_dim(x_MbLD, jnp.mod(t, micro), keepdims=False)
        first_S = jnp.broadcast_to(fresh, carry["state"].shape)
        if repeats > 1:  # after the first M iterations stage 0 takes a returning micro batch
            back_S = jax.vmap(lambda buf: buf[jnp.mod(t, micro)])(carry["loop"])
            first_S = jnp.where(t < micro, first_S, back_S)
        in_S = on_stages(jnp.where((stage_ids == 0)[:, None, None, None], first_S, carry["state"]))
        w_S = jax.tree.map(
            lambda w: on_stages(jax.vmap(lambda w_r, r: w_r[r], in_axes=(1, 0))(w, repeat_S)),
            weights_at(copies_t),
        )
        rows_S = jax.tree.map(lambda r: on_stages(jax.vmap(lambda m: r[m])(micro_S)), rows_M)
        with sharding.use_mesh(mesh, inner):
            out_S, stats_S = jax.vmap(stage_fn, spmd_axis_name=AXIS)(w_S, in_S, rows_S)
        out_S = on_stages(out_S)
        # The last stage's output on its final repeat is a finished micro batch.
        last = (stage_ids == stages - 1) & valid_S & (repeat_S == repeats - 1)
        new = dict(carry, out=jax.vmap(_put)(carry["out"], micro_S, out_S, last))
        new["state"] = rotate(out_S)
        if repeats > 1:  # an unfinished one waits at stage 0 for its next repeat
            back = (stage_ids == 0) & valid_S[-1] & (repeat_S[-1] < repeats - 1)
            new["loop"] = jax.vmap(_put)(
                carry["loop"], jnp.broadcast_to(micro_S[-1], (stages,)), new["state"], back
            )
        stats_S = jax.tree.map(lambda s: s * valid_S.reshape(-1, *[1] * (s.ndim - 1)), stats_S)
        return new, (stats_S, repeat_S)

    b, l, d = x_MbLD.shape[1:]
    zeros_S = on_stages(jnp.zeros((stages, b, l, d), x_BLD.dtype))
    buffer = on_stages(jnp.zeros((stages, micro, b, l, d), x_BLD.dtype))
    carry = {"state": zeros_S, "out": buffer}
    if repeats > 1:
        carry["loop"] = buffer
    carry, (stats_TSK, repeat_TS) = jax.lax.scan(
        iteration, carry, (jnp.arange(total), copies), unroll=unroll
    )
    out_MbLD = carry["out"][stages - 1]
    with sharding.use_mesh(mesh, outer):
        y_BLD = sharding.constrain(merge_rows(out_MbLD), _ACTIVATION)
    stats = _stats_per_unit(stats_TSK, repeat_TS, repeats, micro)
    if "prob" in stats:  # the balance loss of the whole batch, from its per-unit means
        stats = dict(stats, aux_loss=balance_loss_of_means(stats["load"], stats["prob"]))
    return y_BLD, stats


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _copies_combined_by_max(w: jax.Array, count: int) -> jax.Array:
    """`count` copies of w stacked on a new leading axis; their cotangents combine by maximum."""
    return jnp.broadcast_to(w, (count, *w.shape))


def _copies_fwd(w: jax.Array, count: int) -> tuple[jax.Array, None]:
    return _copies_combined_by_max(w, count), None


def _copies_bwd(count: int, _: None, ct: jax.Array) -> tuple[jax.Array]:
    return (jnp.max(ct, axis=0),)


_copies_combined_by_max.defvjp(_copies_fwd, _copies_bwd)


def _put(buffer_M: jax.Array, m: jax.Array, value: jax.Array, write: jax.Array) -> jax.Array:
    """buffer[m] = value where `write`, for one stage's buffer."""
    old = jax.lax.dynamic_index_in_dim(buffer_M, m, keepdims=False)
    return jax.lax.dynamic_update_index_in_dim(buffer_M, jnp.where(write, value, old), m, 0)


def _stats_per_unit(stats_TSK: Any, repeat_TS: jax.Array, repeats: int, micro: int) -> Any:
    """[T, S, K, ...] statistics of the valid iterations (others are zero) -> [U, ...] means
    over the micro batches, in model order."""

    def per_unit(s_TSK: jax.Array) -> jax.Array:
        onehot_TSR = jax.nn.one_hot(repeat_TS, repeats, dtype=s_TSK.dtype)
        s_RSK = jnp.einsum("tsr,tsk...->rsk...", onehot_TSR, s_TSK) / micro
        return s_RSK.reshape(-1, *s_RSK.shape[3:])

    return jax.tree.map(per_unit, stats_TSK)
