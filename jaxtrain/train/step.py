"""The pure, jitted pieces of training: the loss, one optimizer step, one evaluation batch.

Shape letters: B batch (micro batch inside accumulation), L length, V vocab, M micro batches.
A batch is {"inputs": int32[B, L], "targets": int32[B, L], "loss_mask": float32[B, L]} and may
carry "positions" / "segment_ids" (document boundaries).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxtrain.models.feedforward.moe import MOE_METRICS, moe_losses
from jaxtrain.models.layers import fp8
from jaxtrain.parallel import sharding
from jaxtrain.train import buffers
from jaxtrain.train.chunked_loss import head_losses
from jaxtrain.train.cross_entropy import cross_entropy_and_log_z

TrainState = dict[str, Any]  # {"step": int32[], "params": pure dict, "opt_state": optax state}


def token_losses(
    logits_BLV: jax.Array, targets_BL: jax.Array, z_loss: float
) -> tuple[jax.Array, jax.Array]:
    """Per-token cross-entropy in float32, plus z_loss * log(Z)^2 when z_loss > 0."""
    ce_BL, log_z_BL = cross_entropy_and_log_z(logits_BLV, targets_BL)
    total_BL = ce_BL + z_loss * jnp.square(log_z_BL) if z_loss else ce_BL
    return total_BL, ce_BL


def loss_sums(
    graphdef: nnx.GraphDef,
    params: Any,
    batch: dict[str, jax.Array],
    z_loss: float,
    loss_chunks: int = 0,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Summed (not averaged) losses over the masked tokens, so micro batches add up exactly.

    `loss_chunks` > 0 computes the output projection and the cross-entropy together, that many
    chunks of each sequence at a time, never holding the whole [B, L, V] logits
    (`jaxtrain.train.chunked_loss`); 0 computes the logits at once.

    A mixture of experts adds its router losses once per masked token (the batch's mean router
    loss times the token count), and reports its metrics as token-weighted sums (`<name>_sum`).
    """
    model = nnx.merge(graphdef, params)
    inputs = (batch["inputs"], batch.get("positions"), batch.get("segment_ids"))
    mask_BL = batch["loss_mask"].astype(jnp.float32)
    if loss_chunks:
        x_BLD, moe_stats = model.hidden_with_stats(*inputs)
        loss, ce_sum = head_losses(
            x_BLD,
            model.output_kernel(),
            batch["targets"],
            mask_BL,
            chunks=loss_chunks,
            z_loss=z_loss,
        )
    else:
        logits_BLV, moe_stats = model.forward_with_stats(*inputs)
        total_BL, ce_BL = token_losses(logits_BLV, batch["targets"], z_loss)
        loss, ce_sum = jnp.sum(total_BL * mask_BL), jnp.sum(ce_BL * mask_BL)
    aux = {"ce_sum": ce_sum, "tokens": jnp.sum(mask_BL)}
    if moe_stats:
        spec = model.spec
        penalty, moe_metrics = moe_losses(moe_stats, spec.moe_aux_loss_coef, spec.moe_z_loss_coef)
        loss = loss + penalty * aux["tokens"]
        aux.update({f"{k}_sum": v * aux["tokens"] for k, v in moe_metrics.items()})
        if spec.moe_score_bias:  # per-layer load [layers, E] for the aux-free bias update
            aux["moe_layer_load_sum"] = moe_stats["load"] * aux["tokens"]
    return loss, aux


def _split_micro_batches(batch: dict[str, jax.Array], num_micro: int) -> dict[str, jax.Array]:
    """[B, L] -> [M, B/M, L] taking rows j, j+M, ... for micro batch j, so each device keeps
    its own rows of every micro batch and no data moves between devices."""

    def split(x_BL: jax.Array) -> jax.Array:
        x = x_BL.reshape(x_BL.shape[0] // num_micro, num_micro, *x_BL.shape[1:])
        x = jnp.swapaxes(x, 0, 1)
        return sharding.constrain(x, (None, "activation_batch", "activation_length"))

    return {k: split(v) for k, v in batch.items()}


def train_step(
    state: TrainState,
    batch: dict[str, jax.Array],
    *,
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
    num_micro: int,
    z_loss: float,
    loss_chunks: int = 0,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer step over a global batch made of `num_micro` micro batches
    (`loss_chunks`: see `loss_sums`)."""
    grad_fn = jax.value_and_grad(loss_sums, argnums=1, has_aux=True)
    params = state["params"]
    spec = nnx.merge(graphdef, params).spec  # merging only reads the spec at trace time

    if num_micro == 1:
        (_, aux), grads = grad_fn(graphdef, params, batch, z_loss, loss_chunks)
    else:

        def accumulate(carry, micro):
            grads_acc, aux_acc = carry
            (_, aux), grads = grad_fn(graphdef, params, micro, z_loss, loss_chunks)
            grads_acc = buffers.accumulate(graphdef, grads_acc, grads)
            return (grads_acc, {k: aux_acc[k] + aux[k] for k in aux_acc}), None

        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        # The scan carry needs its keys up front.
        keys = ["ce_sum", "tokens"]
        if spec.num_experts:
            keys += [f"{k}_sum" for k in MOE_METRICS]
        init = dict.fromkeys(keys, 0.0)
        if spec.moe_score_bias:
            init["moe_layer_load_sum"] = jnp.zeros((spec.num_moe_layers, spec.num_experts))
        (grads, aux), _ = jax.lax.scan(
            accumulate, (zeros, init), _split_micro_batches(batch, num_micro)
        )

    # Gradients of the summed loss, normalised once by the step's token count: the same
    # update whatever the micro batching.
    denom = jnp.maximum(aux["tokens"], 1.0)
    # fp8 amax histories come back in place of their gradients (jaxtrain.models.layers.fp8).
    fp8_amax = buffers.fp8_histories(graphdef, grads)
    grads = jax.tree.map(lambda g, p: (g / denom).astype(p.dtype), grads, params)
    # The optimizer sees only nnx.Params; buffers (the aux-free expert bias) follow the load.
    trainable, frozen = buffers.split(graphdef, params)
    grads, _ = buffers.split(graphdef, grads)
    updates, opt_state = tx.update(grads, state["opt_state"], trainable)
    new_params = optax.apply_updates(trainable, updates)
    if frozen and spec.moe_bias_update_rate:
        frozen = buffers.update_router_bias(
            frozen, aux["moe_layer_load_sum"] / denom, spec.moe_bias_update_rate
        )
    new_params = buffers.merge(buffers.merge(new_params, frozen), fp8_amax)
    metrics = {
        "loss": aux["ce_sum"] / denom,
        "grad_norm": optax.global_norm(grads),
        "lr": schedule(state["step"]),
        "tokens": aux["tokens"],
    }
    metrics.update({k: aux[f"{k}_sum"] / denom for k in MOE_METRICS if f"{k}_sum" in aux})
    if spec.fp8_stats:
        metrics.update(fp8_statistics(fp8_amax, spec))
    new_state = {"step": state["step"] + 1, "params": new_params, "opt_state": opt_state}
    return new_state, metrics


def fp8_statistics(histories: dict, spec: Any) -> dict[str, jax.Array]:
    """`model.fp8_stats` metrics from the step's updated amax histories (`models.fp8`)."""

    def name(path: tuple) -> str:  # layers/attn/q_proj/fp8_amax -> layers/attn/q_proj
        dotted = "/".join(str(getattr(k, "key", k)) for k in path)
        return dotted.removesuffix("/fp8_amax").removesuffix("_fp8_amax")

    flat = {name(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(histories)[0]}
    return fp8.statistics(flat, fp8.recipe(spec))


def loss_options(train_cfg: Any) -> dict[str, Any]:
    """The `train_step` keywords that `cfg.train` sets: `z_loss` and `loss_chunks`.

    `RunSetup.train_step` and `RunSetup.eval_step` (jaxtrain/run.py) bind them; `eval_step`
    takes `loss_chunks` only (validation reports the cross-entropy).
    """
    # Configs saved before `loss_chunks` existed compute the logits at once.
    return {"z_loss": float(train_cfg.z_loss), "loss_chunks": int(train_cfg.get("loss_chunks", 0))}


def eval_step(
    params: Any, batch: dict[str, jax.Array], *, graphdef: nnx.GraphDef, loss_chunks: int = 0
) -> dict[str, jax.Array]:
    """Summed cross-entropy and token count of one validation batch."""
    _, aux = loss_sums(graphdef, params, batch, 0.0, loss_chunks)
    return aux
