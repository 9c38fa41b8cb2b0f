"""A few sharded train steps on one fixed batch: what the sharding, parallelism and
expert-parallel tests (Mixtral/Qwen3-MoE, DeepSeek, gpt-oss, Llama 4) compare across meshes."""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from ml_collections import ConfigDict

from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.parallel import sharding
from jaxtrain.train import optimizer, state, step


def mesh_config(**sizes: int) -> ConfigDict:
    """A `config.mesh` with every size 1 except those given."""
    cfg = {f"{side}_{a}": 1 for a in sharding.MESH_AXES for side in ("ici", "dcn")}
    cfg.update(sizes)
    return ConfigDict(cfg)


def mesh(**sizes: int) -> jax.sharding.Mesh:
    """A mesh of the given ici sizes (1 for every other axis) on the first devices."""
    return sharding.make_mesh(
        mesh_config(**sizes), devices=jax.devices()[: int(np.prod(list(sizes.values()) or [1]))]
    )


def optim(lr: float = 1e-2) -> ConfigDict:
    """AdamW at a constant learning rate (0 freezes the parameters)."""
    return ConfigDict(
        dict(
            lr=lr,
            min_lr=lr / 10,
            schedule="constant",
            warmup_steps=0,
            decay_steps=0,
            weight_decay=0.1,
            b1=0.9,
            b2=0.95,
            eps=1e-8,
            clip_grad_norm=1.0,
        )
    )


def _jitted_step(spec, on_mesh, steps, optim_cfg, num_micro, rules, loss_chunks):
    """(the jitted train step, its first state) for `spec` on `on_mesh` under rule table
    `rules` (a name)."""
    table = sharding.RULE_PRESETS[rules]
    tx = optimizer.make_optimizer(optim_cfg, steps)
    layout = state.state_layout(spec, tx, on_mesh, table)
    train_state = state.init_state(spec, tx, layout, seed=0)
    fn = jax.jit(
        functools.partial(
            step.train_step,
            graphdef=layout.graphdef,
            tx=tx,
            schedule=optimizer.learning_rate_schedule(optim_cfg, steps),
            num_micro=num_micro,
            z_loss=0.0,
            loss_chunks=loss_chunks,
        ),
        in_shardings=(layout.shardings, None),
        out_shardings=(layout.shardings, None),
    )
    return fn, train_state, layout


def _batch(spec: ModelSpec) -> dict:
    toks = np.random.default_rng(0).integers(0, spec.vocab_size, (8, 17))
    return {
        "inputs": jnp.asarray(toks[:, :-1], jnp.int32),
        "targets": jnp.asarray(toks[:, 1:], jnp.int32),
        "loss_mask": jnp.ones((8, 16), jnp.float32),
    }


def compiled_step_text(spec: ModelSpec, on_mesh: jax.sharding.Mesh, rules: str) -> str:
    """The compiled (partitioned) HLO of `train`'s step, for tests of what it communicates."""
    with sharding.use_mesh(on_mesh, sharding.RULE_PRESETS[rules]):
        fn, train_state, _ = _jitted_step(spec, on_mesh, 2, optim(), 1, rules, 0)
        return fn.lower(train_state, _batch(spec)).compile().as_text()


def train(
    spec: ModelSpec,
    on_mesh: jax.sharding.Mesh,
    steps: int = 2,
    optim_cfg: ConfigDict | None = None,
    num_micro: int = 1,
    rules: str = "fsdp_tensor",
    loss_chunks: int = 0,
) -> tuple[list[float], dict, Any, Any, dict]:
    """(losses, metrics of the last step, final state, parameter shardings, the batch) of
    `steps` steps on one fixed batch of 8 x 16 tokens, under the rule table named `rules`."""
    optim_cfg = optim_cfg or optim()
    with sharding.use_mesh(on_mesh, sharding.RULE_PRESETS[rules]):
        fn, train_state, layout = _jitted_step(
            spec, on_mesh, steps, optim_cfg, num_micro, rules, loss_chunks
        )
        batch = _batch(spec)
        losses = []
        for _ in range(steps):
            train_state, metrics = fn(train_state, batch)
            losses.append(float(metrics["loss"]))
    return (
        losses,
        jax.device_get(metrics),
        jax.device_get(train_state),
        layout.shardings["params"],
        batch,
    )


def dot_operand_types(fn, *args) -> set[str]:
    """Element types of the operands of the compiled program's dots, each read from the
    operand's definition in the dot's own computation."""
    hlo = fn.lower(*args).compile().as_text()
    types = set()
    for computation in hlo.split("\n\n"):
        types_of = dict(re.findall(r"%([\w.-]+) = (\w+)\[", computation))
        for operands in re.findall(r" dot\(([^)]*)\)", computation):
            types |= {types_of[name] for name in re.findall(r"%([\w.-]+)", operands)}
    return types


def saved_residuals(spec: ModelSpec) -> list[Any]:
    """The avals of everything the forward pass of `spec`'s layer stack, on a [2, 16] batch of
    tokens, keeps for the backward pass under `spec.remat`."""
    from flax import nnx
    from jax._src.ad_checkpoint import saved_residuals as residuals_of

    from jaxtrain.models.assembly.decoder import build_model

    graphdef, params = nnx.split(build_model(spec))
    tokens = jnp.zeros((2, 16), jnp.int32)

    def loss(params):
        hidden, _ = nnx.merge(graphdef, params).hidden_states(tokens)
        return jnp.sum(hidden.astype(jnp.float32))

    return [aval for aval, _ in residuals_of(loss, params)]


def saved_activations(spec: ModelSpec) -> dict[str, int]:
    """{dtype name: bytes} of the per-layer activations [layers, B, L, ...] that the forward
    pass of the layer stack keeps for the backward pass, under `spec.remat`."""
    saved: dict[str, int] = {}
    for aval in saved_residuals(spec):
        if aval.shape[:3] == (spec.num_layers, 2, 16):
            saved[aval.dtype.name] = saved.get(aval.dtype.name, 0) + aval.size * aval.dtype.itemsize
    return saved


def on_backend(monkeypatch, **choices: Any) -> None:
    """Traces as on this machine with the backend's `choices` replaced (e.g. bf16_products,
    grouped_matmul)."""
    from jaxtrain.hardware import backend

    chosen = dataclasses.replace(backend.detect(), **choices)
    monkeypatch.setattr(backend, "current", lambda: chosen)


def assert_remat_changes_no_value(spec: ModelSpec) -> None:
    """Two steps of `spec` (which saves or recomputes under its `spec.remat`) give the losses
    and parameters of the same model without remat."""
    remat_losses, _, remat_state, _, _ = train(spec, mesh(), steps=2)
    losses, _, state, _, _ = train(dataclasses.replace(spec, remat="none"), mesh(), steps=2)
    np.testing.assert_allclose(remat_losses, losses, rtol=1e-6)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7),
        remat_state["params"],
        state["params"],
    )
