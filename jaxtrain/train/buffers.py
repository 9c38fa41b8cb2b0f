"""Model state the optimizer never sees: DeepSeek V3's aux-free expert bias (`RouterBias`).

The train state's `params` is the model's whole state as a pure dict (what `nnx.merge` needs,
and what checkpoints save and restore); the optimizer state is built over, and updates only,
its `nnx.Param` leaves. The train step sets the buffers itself from the step's expert load.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

from jaxtrain.models.moe import RouterBias, updated_router_bias


def split(graphdef: nnx.GraphDef, params: Any) -> tuple[dict, dict]:
    """(trainable `nnx.Param` leaves, `RouterBias` buffers) of a whole-state pure dict, by the
    Variable type each leaf has in the model (merging only reads the graph at trace time)."""
    state = nnx.state(nnx.merge(graphdef, params))
    return nnx.to_pure_dict(state.filter(nnx.Param)), nnx.to_pure_dict(state.filter(RouterBias))


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

    The only RouterBias is the expert stack's (`layers.mlp.score_bias`), as long as the load
    statistics come from that one stack.
    """
    return jax.tree.map(lambda bias_LE: updated_router_bias(bias_LE, load_LE, rate), buffers)
