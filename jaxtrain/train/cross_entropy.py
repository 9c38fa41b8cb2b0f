"""Softmax cross-entropy with its gradient written as one pass over the logits.

Shape letters: T tokens (any leading shape), V vocab.

Autodiff of `logsumexp(logits) - logits[target]` materialises the softmax for the log-partition's
gradient, then a separate zero-filled one-hot scatter for the target's, and adds them: three
passes over [T, V] float32 in the backward pass. Here the backward is one elementwise expression
over the saved logits, which matters when V is large.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


@jax.custom_vjp
def cross_entropy_and_log_z(
    logits_TV: jax.Array, targets_T: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """(cross-entropy [T], log-partition log Z [T]) in float32; integer targets index V."""
    return _forward(logits_TV, targets_T)[0]


def _forward(logits_TV, targets_T):
    logits32_TV = logits_TV.astype(jnp.float32)
    log_z_T = jax.nn.logsumexp(logits32_TV, axis=-1)
    target_logit_T = jnp.take_along_axis(logits32_TV, targets_T[..., None], axis=-1)[..., 0]
    # The logits are saved in their own dtype: bfloat16 logits are not widened in memory.
    return (log_z_T - target_logit_T, log_z_T), (logits_TV, targets_T, log_z_T)


def _backward(residuals, cotangents):
    logits_TV, targets_T, log_z_T = residuals
    d_ce_T, d_log_z_T = cotangents
    softmax_TV = jnp.exp(logits_TV.astype(jnp.float32) - log_z_T[..., None])
    is_target_TV = jnp.arange(logits_TV.shape[-1]) == targets_T[..., None]
    d_logits_TV = logits_gradient(softmax_TV, is_target_TV, d_ce_T, d_log_z_T)
    return d_logits_TV.astype(logits_TV.dtype), None


cross_entropy_and_log_z.defvjp(_forward, _backward)


def logits_gradient(
    softmax_TV: jax.Array, is_target_TV: jax.Array, d_ce_T: jax.Array, d_log_z_T: jax.Array
) -> jax.Array:
    """The logits' gradient from the cotangents of the cross-entropy and of log Z, float32:
    d ce / d logits = softmax - onehot(target), d log Z / d logits = softmax."""
    return softmax_TV * (d_ce_T + d_log_z_T)[..., None] - jnp.where(
        is_target_TV, d_ce_T[..., None], 0.0
    )
