"""The output projection and the cross-entropy together, a chunk of each sequence at a time.

Shape letters: B batch, L length, N chunks, C positions per chunk (L = N x C), D embed, V vocab.

Why: the plain path (`Decoder.logits`, then `cross_entropy`) materialises float32 logits
[B, L, V] and keeps them from the forward to the backward pass, which then writes a gradient of
the same size. With a 128K vocabulary that is 512 KB per token each, 4 GB per 8K tokens: twice
the layer inputs a 32-layer, 4096-wide model keeps under full rematerialisation. With
`train.loss_chunks` = N > 0 only one chunk's [B, C, V] logits and gradient exist at a time, and
none survives the forward pass. Whether that lowers a step's peak depends on where the peak
lies (docs/performance.md has figures).

How: the loss is a weighted sum of per-token terms, so its gradient with respect to each chunk's
logits, w x ((1 + 2 z log Z) softmax - onehot(target)), is known as soon as the chunk's logits
are. Each chunk therefore computes its logits, its loss and, in the same pass, its share of
the hidden states' gradient (g W^T) and of the kernel's (x^T g); the backward pass only scales
them by the loss's cotangent. Nothing is recomputed: vocabulary tiling that recomputes the
logits in the backward pass spends a third more of the output layer's FLOPs.

Chunk c holds positions c, c + N, c + 2N, ...: with the sequence split over the `context` mesh
axis, every chunk is spread over all of its shards. A scan runs the chunks one after another,
which is what bounds the memory. When the batch is split over S devices, each keeps its own
partial kernel gradient ([S, D, V], one [D, V] slice per device) through the scan and they are
summed once at the end: summing each chunk's across devices would send the whole kernel
gradient over the network N times.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxtrain.models.layers.products import backward_operands, float32_operands
from jaxtrain.parallel import sharding
from jaxtrain.train.cross_entropy import logits_gradient

_LOGITS_AXES = ("activation_batch", "activation_length", "activation_vocab")
_HIDDEN_AXES = ("activation_batch", "activation_length", "activation_embed")


def head_losses(
    x_BLD: jax.Array,
    kernel_DV: jax.Array,
    targets_BL: jax.Array,
    weights_BL: jax.Array,
    *,
    chunks: int,
    z_loss: float,
) -> tuple[jax.Array, jax.Array]:
    """(sum of w x (ce + z_loss x log(Z)^2), sum of w x ce) over all tokens, float32.

    `x_BLD` the final hidden states and `kernel_DV` the output projection, both in the compute
    dtype; logits are `x @ kernel` in float32, as `Decoder.logits` computes them. `chunks`
    must divide L. Only the first value is differentiable (in x and the kernel); the second is
    a metric and comes back through `stop_gradient`.
    """
    length = x_BLD.shape[1]
    if chunks < 1 or length % chunks:
        raise ValueError(
            f"train.loss_chunks={chunks} must be a positive divisor of the "
            f"sequence length {length}."
        )
    loss, ce = _head_losses(
        x_BLD, kernel_DV, targets_BL, weights_BL.astype(jnp.float32), chunks, float(z_loss)
    )
    return loss, jax.lax.stop_gradient(ce)


def _by_chunk(t_BL, chunks):
    """[B, L, ...] -> [N, B, C, ...]: chunk c takes positions c, c + N, ..."""
    b, length = t_BL.shape[:2]
    t = t_BL.reshape(b, length // chunks, chunks, *t_BL.shape[2:])
    return jnp.moveaxis(t, 2, 0)


def _chunk_terms(x_BCD, kernel_DV, targets_BC, weights_BC, z_loss, with_grads):
    """One chunk's loss sums, and with `with_grads` its hidden-state and kernel gradients."""
    x_BCD = sharding.constrain(x_BCD, _HIDDEN_AXES)
    logits = jax.lax.dot_general(
        *float32_operands(x_BCD, kernel_DV),
        (((2,), (0,)), ((), ())),
        preferred_element_type=jnp.float32,
    )
    logits = sharding.constrain(logits, _LOGITS_AXES)
    peak = jnp.max(logits, axis=-1, keepdims=True)
    exp = jnp.exp(logits - peak)
    total = jnp.sum(exp, axis=-1, keepdims=True)
    log_z = (peak + jnp.log(total))[..., 0]
    # A masked sum rather than a gather: it stays local when the vocabulary is sharded.
    is_target = jnp.arange(logits.shape[-1]) == targets_BC[..., None]
    target_logit = jnp.sum(jnp.where(is_target, logits, 0.0), axis=-1)
    ce = log_z - target_logit
    loss_sum = jnp.sum(weights_BC * (ce + z_loss * jnp.square(log_z)))
    ce_sum = jnp.sum(weights_BC * ce)
    if not with_grads:
        return loss_sum, ce_sum
    # The loss's cotangents: w for the cross-entropy, 2 z log Z w for log Z; in the operand
    # dtype the plain path's backward products use.
    d_logits = logits_gradient(
        exp * (1.0 / total), is_target, weights_BC, 2.0 * z_loss * log_z * weights_BC
    )
    x_op, kernel_op, d_logits = backward_operands(x_BCD, kernel_DV, d_logits)
    d_logits = sharding.constrain(d_logits, _LOGITS_AXES)
    dx_BCD = jax.lax.dot_general(d_logits, kernel_op, (((2,), (1,)), ((), ()))).astype(x_BCD.dtype)
    return (
        loss_sum,
        ce_sum,
        sharding.constrain(dx_BCD, _HIDDEN_AXES),
        _kernel_grad_by_shard(x_op, d_logits),
    )


def _batch_shards(batch: int) -> int:
    shards = sharding.logical_size("activation_batch")
    return shards if batch % shards == 0 else 1


def _partial_kernel_axes(shards: int) -> tuple[str | None, ...]:
    """Logical axes of the [S, D, V] per-shard kernel gradients: one slice per batch shard."""
    return ("activation_batch" if shards > 1 else None, "activation_embed", "activation_vocab")


def _kernel_grad_by_shard(x_BCD, d_logits_BCV):
    """x^T g summed over each batch shard's rows only: [S, D, V] float32, S the batch shards."""
    b, c, d = x_BCD.shape
    shards = _batch_shards(b)
    by_shard = _partial_kernel_axes(shards)[0]
    x = sharding.constrain(
        x_BCD.reshape(shards, b // shards, c, d),
        (by_shard, None, "activation_length", "activation_embed"),
    )
    g = sharding.constrain(
        d_logits_BCV.reshape(shards, b // shards, c, -1),
        (by_shard, None, "activation_length", "activation_vocab"),
    )
    grad = jax.lax.dot_general(
        x, g, (((1, 2), (1, 2)), ((0,), (0,))), preferred_element_type=jnp.float32
    )
    return sharding.constrain(grad, _partial_kernel_axes(shards))


def _scan_chunks(x_BLD, kernel_DV, targets_BL, weights_BL, chunks, z_loss, with_grads):
    xs = (_by_chunk(x_BLD, chunks), _by_chunk(targets_BL, chunks), _by_chunk(weights_BL, chunks))

    def step(carry, chunk):
        terms = _chunk_terms(chunk[0], kernel_DV, *chunk[1:], z_loss, with_grads)
        sums = (carry[0] + terms[0], carry[1] + terms[1])
        if not with_grads:
            return sums, None
        return (*sums, carry[2] + terms[3]), terms[2]

    zero = jnp.zeros((), jnp.float32)
    init = (zero, zero)
    if with_grads:
        shards = _batch_shards(x_BLD.shape[0])
        partial = jnp.zeros((shards, *kernel_DV.shape), jnp.float32)
        init += (sharding.constrain(partial, _partial_kernel_axes(shards)),)
    carry, dx_NBCD = jax.lax.scan(step, init, xs)
    if not with_grads:
        return carry
    # [N, B, C, D] back to [B, L, D] with position j x N + c at chunk c, row j.
    dx_BLD = jnp.moveaxis(dx_NBCD, 0, 2).reshape(x_BLD.shape)
    # Summed over the batch shards straight into the kernel's own layout (a reduce-scatter
    # under FSDP): kept until the backward pass, it should take no more than the parameter.
    dkernel_DV = sharding.constrain(carry[2].sum(0), ("embed", "vocab"))
    return carry[0], carry[1], sharding.constrain(dx_BLD, _HIDDEN_AXES), dkernel_DV


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _head_losses(x_BLD, kernel_DV, targets_BL, weights_BL, chunks, z_loss):
    # Evaluation and other undifferentiated calls skip the gradient products.
    return _scan_chunks(x_BLD, kernel_DV, targets_BL, weights_BL, chunks, z_loss, False)


def _head_losses_fwd(x_BLD, kernel_DV, targets_BL, weights_BL, chunks, z_loss):
    loss, ce, dx_BLD, dkernel_DV = _scan_chunks(
        x_BLD, kernel_DV, targets_BL, weights_BL, chunks, z_loss, True
    )
    return (loss, ce), (dx_BLD, dkernel_DV.astype(kernel_DV.dtype))


def _head_losses_bwd(chunks, z_loss, residuals, cotangents):
    del chunks, z_loss
    dx_BLD, dkernel_DV = residuals
    # The ce sum reaches callers through stop_gradient (see `head_losses`): only the loss's
    # cotangent can be nonzero. Targets and weights are data: no gradient.
    d_loss, _ = cotangents
    return (
        (dx_BLD * d_loss).astype(dx_BLD.dtype),
        (dkernel_DV * d_loss).astype(dkernel_DV.dtype),
        None,
        None,
    )


_head_losses.defvjp(_head_losses_fwd, _head_losses_bwd)
