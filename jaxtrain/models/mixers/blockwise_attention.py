"""Causal self-attention computed block by block, with a hand-written backward pass.

Shape letters: B batch, L length (queries and keys), N query heads, K kv heads, G query heads per
kv head (N = K x G), H query/key head dim, V value head dim, Q a block of queries, S the keys one
block of queries can see.

Why not `softmax(q k^T) v` under autodiff: the autodiff backward keeps every layer's [B, N, L, L]
probabilities alive from the forward pass to the backward pass, masked triangle included, and
on CPUs writing, storing and re-reading those tensors costs more than the matmuls. This function
keeps q, k, v, the output and one log-sum-exp per query row, and recomputes the probabilities
block by block in the backward pass (the flash-attention recurrence, without its online softmax:
a block's keys are all in memory at once). Query blocks only visit the keys they can see, so
above-diagonal blocks (and, with a sliding window or chunked local attention, blocks left of the
window or chunk) are never computed.

On CPUs, when one layer's visible blocks fit in `KEPT_PROBABILITIES_BYTES`, the forward pass also
keeps each block's softmax numerator exp(s - max) and the rows' 1 / sum, and the backward pass
uses them instead of recomputing q k^T, the mask and the exponential (see
`keeps_probabilities`).

Attention sinks (gpt-oss) add one learned logit per query head to every softmax denominator:
a key with that score and a zero value. The log-sum-exp then includes it, and its gradient is
-p_sink x (dO . O) summed over the head's queries.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxtrain.hardware import backend
from jaxtrain.models.layers.products import float32_operands
from jaxtrain.models.layers.rounding import narrow

_MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)


def _blocks(length: int, block: int, window: int, chunk: int) -> list[tuple[int, int, int]]:
    """(first query, end query, first visible key) of each query block: the block's first
    query sees back to its window's start, or to its chunk's start."""
    out = []
    for start in range(0, length, block):
        end = min(start + block, length)
        first_key = max(0, start - window + 1) if window else 0
        if chunk:
            first_key = max(first_key, start // chunk * chunk)
        out.append((start, end, first_key))
    return out


def _visible(
    start: int, end: int, first_key: int, window: int, chunk: int, segment_BL: jax.Array | None
) -> jax.Array:
    """Boolean [B or 1, 1, 1, Q, S]: causal, inside the window or chunk, within one document."""
    rows = jnp.arange(start, end)[:, None]
    cols = jnp.arange(first_key, end)[None, :]
    allowed_QS = cols <= rows
    if window:
        allowed_QS &= rows - cols < window
    if chunk:
        allowed_QS &= rows // chunk == cols // chunk
    allowed = allowed_QS[None]
    if segment_BL is not None:
        same_BQS = segment_BL[:, start:end, None] == segment_BL[:, None, first_key:end]
        allowed = allowed & same_BQS
    return allowed[:, None, None]


def _scores(q_BKGQH, kT_BKHS, mask, scale, cap=0.0):
    """Masked float32 scores, and with a soft-cap the derivative of the cap, 1 - tanh^2 (None
    without one)."""
    s = (
        jnp.einsum(
            "bkgqh,bkhs->bkgqs",
            *float32_operands(q_BKGQH, kT_BKHS),
            preferred_element_type=jnp.float32,
        )
        * scale
    )
    if not cap:
        return jnp.where(mask, s, _MASKED), None
    t = jnp.tanh(s / cap)
    return jnp.where(mask, cap * t, _MASKED), 1.0 - t * t


def _split_heads(q_BLNH, k_BLKH, v_BLKV):
    """Head-major layouts: q [B, K, G, L, H], k [B, K, L, H], v [B, K, L, V]."""
    b, l, n, h = q_BLNH.shape
    kv = k_BLKH.shape[2]
    q = q_BLNH.reshape(b, l, kv, n // kv, h).transpose(0, 2, 3, 1, 4)
    return q, k_BLKH.transpose(0, 2, 1, 3), v_BLKV.transpose(0, 2, 1, 3)


def _transposed(x_BKLH):
    """[B, K, H, L]: keys (or values) as the right-hand operand of a product over H, made once
    per layer rather than once per query block."""
    return x_BKLH.transpose(0, 1, 3, 2)


def _sink_logits(sinks_N, kv_heads):
    """Sinks as [1, K, G, 1, 1] float32 logits, broadcasting against [B, K, G, Q, S] scores."""
    return sinks_N.astype(jnp.float32).reshape(1, kv_heads, -1, 1, 1)


def _forward(
    q_BLNH, k_BLKH, v_BLKV, sinks_N, segment_BL, window, chunk, scale, block, keep_probs, cap
):
    q, k, v = _split_heads(q_BLNH, k_BLKH, v_BLKV)
    k_T = _transposed(k)
    sink = None if sinks_N is None else _sink_logits(sinks_N, k.shape[1])
    outs, lses, kept = [], [], []
    for start, end, first in _blocks(q.shape[3], block, window, chunk):
        mask = _visible(start, end, first, window, chunk, segment_BL)
        s, _ = _scores(q[:, :, :, start:end], k_T[..., first:end], mask, scale, cap)
        m = jnp.max(s, axis=-1, keepdims=True)
        if sink is not None:
            m = jnp.maximum(m, sink)
        p = jnp.exp(s - m)
        total = jnp.sum(p, axis=-1, keepdims=True)
        if sink is not None:
            total = total + jnp.exp(sink - m)  # the sink's share of the denominator
        o = jnp.einsum(
            "bkgqs,bksv->bkgqv",
            *float32_operands(narrow(p, v.dtype), v[:, :, first:end]),
            preferred_element_type=jnp.float32,
        )
        outs.append(o / total)
        lses.append((m + jnp.log(total))[..., 0])
        if keep_probs:
            kept.append((p, 1 / total))
    o_BKGLV = jnp.concatenate(outs, axis=3)
    lse_BKGL = jnp.concatenate(lses, axis=3)
    b, l, n, _ = q_BLNH.shape
    out_BLNV = narrow(o_BKGLV.transpose(0, 3, 1, 2, 4).reshape(b, l, n, -1), q_BLNH.dtype)
    return out_BLNV, (q, k, v, narrow(o_BKGLV, q_BLNH.dtype), lse_BKGL, tuple(kept) or None)


def blockwise_causal_attention(
    q_BLNH: jax.Array,
    k_BLKH: jax.Array,
    v_BLKV: jax.Array,
    segment_BL: jax.Array | None,
    window: int,
    scale: float,
    block: int,
    *,
    chunk: int = 0,
    sinks_N: jax.Array | None = None,
    softcap: float = 0.0,
) -> jax.Array:
    """softmax(scale x q k^T, causal [, window | chunk] [, same segment] [, sink]) v for
    self-attention.

    q [B, L, N, H], k [B, L, K, H], v [B, L, K, V] (K divides N); `segment_BL` int ids or None;
    `window` 0 for full causal attention; `chunk` > 0 limits each token to earlier tokens of
    its own chunk of that many positions; `sinks_N` one extra softmax logit per query head;
    `softcap` > 0 bounds the scaled scores by softcap x tanh(score / softcap) (Grok). Returns [B, L, N, V] in q's dtype; scores, softmax and accumulation are float32.
    """
    # Capped scores need tanh in the backward pass: recompute them rather than keep them.
    keep_probs = not softcap and keeps_probabilities(q_BLNH.shape, block, window, chunk)
    return _attention(
        q_BLNH,
        k_BLKH,
        v_BLKV,
        sinks_N,
        segment_BL,
        window,
        chunk,
        scale,
        block,
        keep_probs,
        float(softcap),
    )


# The most one layer's kept softmax numerators may take (float32, visible blocks only). The
# 8 x 256-token benchmark keeps 10 MB per layer; 2 x 1024 tokens with 8 heads keep 36 MB.
KEPT_PROBABILITIES_BYTES = 64 << 20


def keeps_probabilities(shape_BLNH: tuple[int, ...], block: int, window: int, chunk: int) -> bool:
    """Whether the forward pass keeps each block's softmax numerator for the backward pass.

    Where the backend keeps them (CPUs; see `jaxtrain.hardware.backend`) and they fit in
    `KEPT_PROBABILITIES_BYTES`: the backward pass then skips one of the seven block products and
    the exponential, and the numerator, written once in the forward pass anyway, is read back.
    """
    if not backend.current().keep_attention_probabilities:
        return False
    b, l, n, _ = shape_BLNH
    entries = sum(
        (end - start) * (end - first) for start, end, first in _blocks(l, block, window, chunk)
    )
    return b * n * entries * 4 <= KEPT_PROBABILITIES_BYTES


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7, 8, 9, 10))
def _attention(
    q_BLNH, k_BLKH, v_BLKV, sinks_N, segment_BL, window, chunk, scale, block, keep_probs, cap
):
    return _forward(
        q_BLNH, k_BLKH, v_BLKV, sinks_N, segment_BL, window, chunk, scale, block, False, cap
    )[0]


def _fwd(q_BLNH, k_BLKH, v_BLKV, sinks_N, segment_BL, window, chunk, scale, block, keep_probs, cap):
    out, residuals = _forward(
        q_BLNH, k_BLKH, v_BLKV, sinks_N, segment_BL, window, chunk, scale, block, keep_probs, cap
    )
    return out, (*residuals, sinks_N, segment_BL)


def _bwd(window, chunk, scale, block, keep_probs, cap, residuals, dout_BLNV):
    q, k, v, o, lse, kept, sinks_N, segment_BL = residuals
    b, kv, g, l, h = q.shape
    dout = dout_BLNV.reshape(b, l, kv, g, -1).transpose(0, 2, 3, 1, 4)
    # D_i = sum_j P_ij dP_ij = dO_i . O_i: the softmax Jacobian's row term.
    delta_BKGL = jnp.sum(dout.astype(jnp.float32) * o.astype(jnp.float32), axis=-1)
    dq_blocks = []
    # dK and dV accumulate transposed, [B, K, H, L] and [B, K, V, L]: as the product
    # (small [H, Q] operand) x ([Q, S] block in its natural row-major layout), no matmul needs
    # a transposed copy of the [Q, S]-sized probabilities or score gradients.
    dk_T = jnp.zeros((b, kv, h, l), jnp.float32)
    dv_T = jnp.zeros((b, kv, v.shape[-1], l), jnp.float32)
    k_T, v_T = _transposed(k), _transposed(v)
    for i, (start, end, first) in enumerate(_blocks(l, block, window, chunk)):
        q_b, k_b = q[:, :, :, start:end], k[:, :, first:end]
        do_b = dout[:, :, :, start:end]
        dcap = None
        if kept is None:
            mask = _visible(start, end, first, window, chunk, segment_BL)
            s, dcap = _scores(q_b, k_T[..., first:end], mask, scale, cap)
            p = jnp.exp(s - lse[:, :, :, start:end, None])
            row_scale = 1.0
        else:
            # The kept numerator exp(s - m) times the row's 1 / sum is the probability; the
            # row factor goes on the small [Q, V] and [Q, 1] operands instead of the block.
            p, row_scale = kept[i]
        dv_T = dv_T.at[:, :, :, first:end].add(
            jnp.einsum(
                "bkgqv,bkgqs->bkvs",
                *float32_operands(do_b * row_scale, narrow(p, v.dtype)),
                preferred_element_type=jnp.float32,
            )
        )
        dp = jnp.einsum(
            "bkgqv,bkvs->bkgqs",
            *float32_operands(do_b, v_T[..., first:end]),
            preferred_element_type=jnp.float32,
        )
        ds = p * ((dp - delta_BKGL[:, :, :, start:end, None]) * (scale * row_scale))
        if dcap is not None:  # through the soft-cap: d(cap x tanh(s / cap)) = 1 - tanh^2
            ds = ds * dcap
        ds = narrow(ds, q.dtype)
        dq_blocks.append(
            jnp.einsum(
                "bkgqs,bksh->bkgqh", *float32_operands(ds, k_b), preferred_element_type=jnp.float32
            )
        )
        dk_T = dk_T.at[:, :, :, first:end].add(
            jnp.einsum(
                "bkgqh,bkgqs->bkhs", *float32_operands(q_b, ds), preferred_element_type=jnp.float32
            )
        )
    dq = jnp.concatenate(dq_blocks, axis=3).transpose(0, 3, 1, 2, 4).reshape(b, l, kv * g, h)
    dk = dk_T.transpose(0, 3, 1, 2)
    dv = dv_T.transpose(0, 3, 1, 2)
    dsinks = None
    if sinks_N is not None:
        # The sink is a key with value 0: dP_sink = 0, so dS_sink = -p_sink x D.
        p_sink_BKGL = jnp.exp(_sink_logits(sinks_N, kv)[..., 0] - lse)
        dsinks = -jnp.sum(p_sink_BKGL * delta_BKGL, axis=(0, 3)).reshape(-1)
        dsinks = dsinks.astype(sinks_N.dtype)
    return narrow(dq, q.dtype), narrow(dk, k.dtype), narrow(dv, v.dtype), dsinks, None


_attention.defvjp(_fwd, _bwd)
