"""Model state the optimizer never sees: DeepSeek V3's aux-free expert bias (`RouterBias`) and
the amax histories of fp8 projections (`Fp8Amax`).

The train state's `params` is the model's whole state as a pure dict (what `nnx.merge` needs,
and what checkpoints save and restore); the optimizer state is built over, and updates only,
its `nnx.Param` leaves. The train step sets the buffers itself: the expert bias from the step's
expert load, each amax history to what the backward pass returned as its gradient
(`jaxtrain.models.layers.fp8`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.feedforward.moe import RouterBias, updated_router_bias
from jaxtrain.models.layers.fp8 import Fp8Amax


def split(graphdef: nnx.GraphDef, params: Any) -> tuple[dict, dict]:
    """(trainable `nnx.Param` leaves, `RouterBias` buffers) of a whole-state pure dict, by the
    Variable type each leaf has in the model (merging only reads the graph at trace time)."""
    state = nnx.state(nnx.merge(graphdef, params))
    return nnx.to_pure_dict(state.filter(nnx.Param)), nnx.to_pure_dict(state.filter(RouterBias))


def fp8_histories(graphdef: nnx.GraphDef, tree: Any) -> dict:
    """The `Fp8Amax` leaves of a whole-state pure dict (or of its gradients: there, the
    updated histories)."""
    return nnx.to_pure_dict(nnx.state(nnx.merge(graphdef, tree)).filter(Fp8Amax))


def weights(graphdef: nnx.GraphDef, params: Any) -> dict:
    """Everything but the amax histories: what a Hugging Face export or `init_from` carries."""
    state = nnx.state(nnx.merge(graphdef, params))
    return nnx.to_pure_dict(state.filter(nnx.Any(nnx.Param, RouterBias)))


def accumulate(graphdef: nnx.GraphDef, total: Any, grads: Any) -> Any:
    """`total` plus a micro batch's float32 gradients; the amax histories instead take the
    elementwise maximum, so the step's newest amax is the largest of its micro batches'."""
    summed = jax.tree.map(lambda a, g: a + g.astype(jnp.float32), total, grads)
    histories = jax.tree.map(
        jnp.maximum, fp8_histories(graphdef, total), fp8_histories(graphdef, grads)
    )
    return replace(summed, histories)


def replace(tree: Any, part: Any) -> Any:
    """`tree` with the leaves `part` holds (a pure dict whose paths all exist in `tree`)."""
    if not isinstance(part, dict):
        return part
    return {key: replace(value, part[key]) if key in part else value for key, value in tree.items()}


def drop(tree: Any, part: Any) -> Any:
    """`tree` without the leaves at the paths `part` holds (the inverse of `merge`)."""
    out = {}
    for key, value in tree.items():
        if key not in part:
            out[key] = value
        elif isinstance(part[key], dict) and isinstance(value, dict):
            if rest := drop(value, part[key]):
                out[key] = rest
    return out


def trainable(state: nnx.State) -> nnx.State:
    """The part of a model state the optimizer updates."""
    return state.filter(nnx.Param)


def merge(a: Any, b: Any) -> Any:
    """The union of two pure dicts with disjoint leaves (the inverse of `split`)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return b if isinstance(a, dict) and not a else a
    out = dict(a)
    for key, value in b.items():
        out[key] = merge(out[key], value) if key in out else value
    return out


def update_router_bias(buffers: dict, load_LE: jax.Array, rate: float) -> dict:
    """Every RouterBias moved toward balance by the expert-block loads [layers, E] of the step.

    A decoder has one RouterBias, its expert stack's (`layers.mlp.score_bias`), and the load
    statistics come from that stack. A hybrid stack has one per expert position of the pattern's
    period (`blocks.s{j}.mixer.score_bias`, [repeats, E]); its load rows come position by
    position in pattern order (`HybridStack`), so each bias takes the next rows.
    """
    leaves, treedef = jax.tree_util.tree_flatten_with_path(buffers)
    if len(leaves) <= 1:
        return jax.tree.map(lambda bias_LE: updated_router_bias(bias_LE, load_LE, rate), buffers)
    new, start = [None] * len(leaves), 0
    for i in sorted(range(len(leaves)), key=lambda i: _stack_position(leaves[i][0])):
        bias_LE = leaves[i][1]
        rows = bias_LE.shape[0]
        new[i] = updated_router_bias(bias_LE, load_LE[start : start + rows], rate)
        start += rows
    return jax.tree_util.tree_unflatten(treedef, new)


def _stack_position(path: tuple) -> int:
    """j of the `s{j}` stack a hybrid's leaf lives in."""
    for key in path:
        name = str(getattr(key, "key", ""))
        if name[:1] == "s" and name[1:].isdigit():
            return int(name[1:])
    raise ValueError(f"no s{{j}} stack in {jax.tree_util.keystr(path)}")
