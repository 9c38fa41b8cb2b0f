"""The gated delta rule: a linear-attention recurrence, chunked for training and stepped for
decoding. Gated DeltaNet (`gated_delta.py`, one decay per head and token) and Kimi delta
attention (`kda.py`, one decay per head, token and key channel) both run on it.

Shape letters: B batch, L length, H heads (value heads; callers repeat query/key heads to
match), K key head width, V value head width, N chunks, C chunk length, W conv taps.

Per head, with a state S [K, V] that starts at zero (or at a decoding cache's state):

    S_t = diag(exp(g_t)) S_{t-1}                            decay: g_t <= 0, [K] or one scalar
    S_t = S_t + beta_t k_t (v_t - S_t^T k_t)^T               delta rule: write the error of
                                                             the state's prediction of v_t
    o_t = S_t^T q_t

`chunked_delta_rule` computes the same outputs C tokens at a time: within a chunk the C
rank-one delta updates collapse into one triangular solve (the UT transform of the WY
representation: Yang et al. 2024, "Parallelizing Linear Transformers with the Delta Rule over
Sequence Length"), and a `lax.scan` carries the state from chunk to chunk, so the sequential
part has L / C steps of matrix products instead of L steps of vector ones. Every exponent it
takes is a decay between two positions of one chunk, earlier to later, so none is positive and
nothing overflows however strong the decay.

Packed documents (`segment_BL`) reset the state where a new document starts: decays and
updates across a document boundary are masked, exactly as if each document ran alone.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

_F32 = jnp.float32


def l2_normalize(x: jax.Array, eps: float = 1e-6) -> jax.Array:
    """x / sqrt(sum(x^2) + eps) over the last axis, in float32 (FLA's and transformers' `l2norm`:
    eps inside the root, not a floor on the norm)."""
    x = x.astype(_F32)
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def recurrent_step(
    q_BHK: jax.Array,
    k_BHK: jax.Array,
    v_BHV: jax.Array,
    g_BHk: jax.Array,
    beta_BH: jax.Array,
    state_BHKV: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """One token of the recurrence: (o [B, H, V], new state [B, H, K, V]), in float32.

    `g_BHk` is the log decay, [B, H, K] per key channel or [B, H, 1] for one per head.
    """
    q, k, v, g, beta = (x.astype(_F32) for x in (q_BHK, k_BHK, v_BHV, g_BHk, beta_BH))
    state = state_BHKV.astype(_F32) * jnp.exp(g)[..., None]
    predicted_BHV = jnp.einsum("bhk,bhkv->bhv", k, state)
    delta_BHV = beta[..., None] * (v - predicted_BHV)
    state = state + k[..., :, None] * delta_BHV[..., None, :]
    return jnp.einsum("bhk,bhkv->bhv", q, state), state


def _chunks(x: jax.Array, chunk: int) -> jax.Array:
    """[B, L, H, ...] (L a multiple of chunk) -> [B, H, N, C, ...]."""
    b, l, h = x.shape[:3]
    x = x.reshape(b, l // chunk, chunk, h, *x.shape[3:])
    return jnp.moveaxis(x, 3, 1)


def _pad(x: jax.Array, pad: int) -> jax.Array:
    if not pad:
        return x
    return jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))


def chunked_delta_rule(
    q_BLHK: jax.Array,
    k_BLHK: jax.Array,
    v_BLHV: jax.Array,
    g_BLHk: jax.Array,
    beta_BLH: jax.Array,
    *,
    chunk: int = 64,
    state_BHKV: jax.Array | None = None,
    segment_BL: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The delta rule over a sequence: (o [B, L, H, V] float32, final state [B, H, K, V]).

    `g_BLHk` is the log decay per token, [B, L, H, K] (per key channel, KDA) or [B, L, H] (one
    per head, Gated DeltaNet: the within-chunk decays are then [C, C] rather than [C, C, K]).
    q and k come normalized and scaled as the caller wants them. The sequence is padded to a
    multiple of `chunk` with tokens that neither decay nor write the state.
    """
    b, l, h, kd = k_BLHK.shape
    vd = v_BLHV.shape[-1]
    per_channel = g_BLHk.ndim == 4
    pad = -l % chunk
    q, k, v, g, beta = (
        _pad(x.astype(_F32), pad) for x in (q_BLHK, k_BLHK, v_BLHV, g_BLHk, beta_BLH)
    )
    if not per_channel:
        g = g[..., None]  # [B, L, H, 1]: one decay broadcast over the key channels
    q, k, v, g = (_chunks(x, chunk) for x in (q, k, v, g))  # [B, H, N, C, *]
    beta = _chunks(beta[..., None], chunk)  # [B, H, N, C, 1]
    gc = jnp.cumsum(g, axis=3)  # log decay from the chunk's start through each position
    gc_last = gc[:, :, :, -1:, :]  # [B, H, N, 1, k]

    causal_CC = jnp.tril(jnp.ones((chunk, chunk), bool))
    # Masks of the packed-document case, [B, 1, N, C(, C)]; all true without segments.
    same_CC = causal_CC
    carried = ends = jnp.ones((1, 1, 1, chunk, 1), bool)
    if segment_BL is not None:
        seg = jnp.pad(segment_BL, [(0, 0), (0, pad)], mode="edge").reshape(b, 1, -1, chunk)
        before = jnp.concatenate([seg[:, :, :1, :1], seg[:, :, :-1, -1:]], axis=2)
        same_CC = causal_CC & (seg[..., :, None] == seg[..., None, :])
        carried = (seg == before)[..., None]  # token i still in the document the state holds
        ends = (seg == seg[..., -1:])[..., None]  # token j in the document the chunk ends in

    # Decay from position j to position i of a chunk, for j <= i of one document.
    diff = gc[..., :, None, :] - gc[..., None, :, :]  # [B, H, N, C, C, k]
    decay = jnp.exp(jnp.where(same_CC[..., None], diff, -jnp.inf))
    if per_channel:
        kk_CC = jnp.einsum("bhnik,bhnjk,bhnijk->bhnij", k, k, decay)
        qk_CC = jnp.einsum("bhnik,bhnjk,bhnijk->bhnij", q, k, decay)
    else:
        decay = decay[..., 0]
        kk_CC = jnp.einsum("bhnik,bhnjk->bhnij", k, k) * decay
        qk_CC = jnp.einsum("bhnik,bhnjk->bhnij", q, k) * decay

    # UT transform: (I + strict_lower(beta k k^T decay)) u = beta v, and likewise for the keys
    # that read the state carried into the chunk (w); then the chunk's corrected values are
    # u - w S.
    strict = jnp.tril(jnp.ones((chunk, chunk), bool), -1)
    lhs_CC = jnp.where(strict, beta * kk_CC, 0.0) + jnp.eye(chunk, dtype=_F32)
    u = solve_triangular(lhs_CC, beta * v, lower=True, unit_diagonal=True)
    w = solve_triangular(lhs_CC, beta * k * jnp.exp(gc) * carried, lower=True, unit_diagonal=True)
    q_read = q * jnp.exp(gc) * carried  # queries reading the carried state
    k_write = k * jnp.exp(gc_last - gc) * ends  # keys writing the state passed on
    # The carried state survives the chunk only if the chunk ends in its document.
    chunk_decay = jnp.exp(gc_last[:, :, :, 0]) * carried[:, :, :, -1]  # [B, H, N, k]

    def step(state_BHKV, xs):
        q_read, k_write, u, w, qk_CC, chunk_decay = xs
        v_new = u - jnp.einsum("bhck,bhkv->bhcv", w, state_BHKV)
        o = jnp.einsum("bhck,bhkv->bhcv", q_read, state_BHKV) + jnp.einsum(
            "bhij,bhjv->bhiv", qk_CC, v_new
        )
        state_BHKV = state_BHKV * chunk_decay[..., None] + jnp.einsum(
            "bhck,bhcv->bhkv", k_write, v_new
        )
        return state_BHKV, o

    if state_BHKV is None:
        state_BHKV = jnp.zeros((b, h, kd, vd), _F32)
    xs = tuple(jnp.moveaxis(x, 2, 0) for x in (q_read, k_write, u, w, qk_CC, chunk_decay))
    state_BHKV, o_NBHCV = jax.lax.scan(step, state_BHKV.astype(_F32), xs)
    o_BLHV = jnp.transpose(o_NBHCV, (1, 0, 3, 2, 4)).reshape(b, -1, h, vd)[:, :l]
    return o_BLHV, state_BHKV
