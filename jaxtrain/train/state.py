"""Creating the train state directly in its shards.

Shapes and logical axes come from `nnx.eval_shape` (nothing allocated); the rule table turns them
into NamedShardings; a jitted init with those out_shardings then writes each parameter straight
into its shards, so no process ever holds the whole model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtrain.models.assembly.decoder import Decoder
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.parallel import sharding
from jaxtrain.train import buffers


@dataclasses.dataclass
class StateLayout:
    """What the jitted functions need to know about the state: structure and shardings."""

    graphdef: nnx.GraphDef
    abstract: dict[str, Any]  # ShapeDtypeStructs of the train state, with shardings
    shardings: dict[str, Any]  # NamedShardings of the train state
    param_axes: Any  # logical axes per parameter


def abstract_model(spec: ModelSpec) -> tuple[nnx.GraphDef, Any]:
    """Graph definition and abstract (shape-only) parameter state of the model."""
    model = nnx.eval_shape(lambda: Decoder(spec, rngs=nnx.Rngs(params=0)))
    return nnx.split(model)


def _pure(state: Any) -> Any:
    return nnx.to_pure_dict(state)


def state_layout(
    spec: ModelSpec, tx: optax.GradientTransformation, mesh: Mesh, rules: Any
) -> StateLayout:
    """Abstract train state and its shardings, computed without allocating anything.

    `params` is the model's whole state (buffers such as the aux-free expert bias included);
    the optimizer state covers its `nnx.Param` leaves only.
    """
    graphdef, abstract_params_state = abstract_model(spec)
    param_axes = _pure(sharding.param_logical_axes(abstract_params_state))
    param_shardings = sharding.shardings_for(param_axes, mesh, rules)
    abstract_params = _pure(abstract_params_state)
    trainable = buffers.trainable(abstract_params_state)
    abstract_opt = jax.eval_shape(tx.init, _pure(trainable))
    replicated = NamedSharding(mesh, PartitionSpec())
    opt_shardings = optax.tree_map_params(
        tx,
        lambda _, s: s,
        abstract_opt,
        sharding.shardings_for(_pure(sharding.param_logical_axes(trainable)), mesh, rules),
        transform_non_params=lambda _: replicated,
    )
    shardings = {"step": replicated, "params": param_shardings, "opt_state": opt_shardings}
    abstract = {
        "step": jax.ShapeDtypeStruct((), jnp.int32),
        "params": abstract_params,
        "opt_state": abstract_opt,
    }
    abstract = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
    )
    return StateLayout(graphdef, abstract, shardings, param_axes)


def init_state(
    spec: ModelSpec, tx: optax.GradientTransformation, layout: StateLayout, seed: int
) -> dict[str, Any]:
    """A freshly initialised, sharded train state."""

    def init() -> dict[str, Any]:
        model = Decoder(spec, rngs=nnx.Rngs(params=seed))
        state = nnx.state(model)
        return {
            "step": jnp.zeros((), jnp.int32),
            "params": _pure(state),
            "opt_state": tx.init(_pure(buffers.trainable(state))),
        }

    return jax.jit(init, out_shardings=layout.shardings)()


def count_params(params: Any) -> int:
    """Number of scalars in a parameter tree (arrays or ShapeDtypeStructs)."""
    return sum(int(x.size) for x in jax.tree.leaves(params))
