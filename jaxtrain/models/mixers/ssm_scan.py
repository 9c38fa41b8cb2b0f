"""The sequence mixing of Mamba blocks: the causal depthwise convolution, Mamba-2's chunked
state-space-duality (SSD) scan, and Mamba-1's selective scan.

Shape letters: B batch, L length, C channels, K conv width, H heads, P head width, G groups,
N state size, Q chunk length, Z chunks, D inner channels (Mamba-1).

Both scans work chunk by chunk: within a chunk of Q tokens the work is dense (matmuls for
SSD, an associative scan for Mamba-1), and a `lax.scan` over the chunks carries the state, so
nothing loops over single time steps and XLA sees a few large products per chunk. A decoding
step is the same code with L = 1 and the cached state as the initial one.

Packed documents (`segment_BL`, one id per token) reset at each document's first token: no
convolution tap reads an earlier document's input, and no state crosses the boundary, as
Mamba-2's kernels do with `seq_idx`. The state given on entry belongs to the row's first
document.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def causal_conv(
    x_BLC: jax.Array,
    w_CK: jax.Array,
    b_C: jax.Array | None,
    state_BSC: jax.Array | None = None,
    segment_BL: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Depthwise causal convolution: out[t] = sum_j w[:, j] x[t - K + 1 + j] (+ bias), the
    inputs before the sequence coming from `state_BSC` (the previous K - 1 inputs; zeros when
    None), taps into another document of `segment_BL` left out. Returns (output [B, L, C], the
    last K - 1 inputs as the next state)."""
    b, l, c = x_BLC.shape
    k = w_CK.shape[1]
    if state_BSC is None:
        state_BSC = jnp.zeros((b, k - 1, c), x_BLC.dtype)
    xp = jnp.concatenate([state_BSC.astype(x_BLC.dtype), x_BLC], axis=1)
    w_CK = w_CK.astype(x_BLC.dtype)
    if segment_BL is None:
        out = sum(xp[:, j : j + l] * w_CK[:, j] for j in range(k))
    else:
        # The state's inputs count as the first document's, as the state does in the scans.
        segp = jnp.pad(segment_BL, [(0, 0), (k - 1, 0)], mode="edge")
        out = sum(
            jnp.where((segp[:, j : j + l] == segment_BL)[..., None], xp[:, j : j + l], 0)
            * w_CK[:, j]
            for j in range(k)
        )
    if b_C is not None:
        out = out + b_C.astype(x_BLC.dtype)
    return out, xp[:, l:]


def _chunks(x: jax.Array, q: int) -> jax.Array:
    """[B, L, ...] -> [B, Z, Q, ...], zero-padding L to a multiple of Q."""
    pad = (-x.shape[1]) % q
    if pad:
        x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
    return x.reshape(x.shape[0], -1, q, *x.shape[2:])


def ssd_scan(
    x_BLHP: jax.Array,
    dt_BLH: jax.Array,
    a_H: jax.Array,
    b_BLGN: jax.Array,
    c_BLGN: jax.Array,
    d_H: jax.Array,
    chunk: int,
    state_BHPN: jax.Array | None = None,
    segment_BL: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Mamba-2's scan h_t = exp(dt_t a) h_{t-1} + dt_t x_t B_t^T, y_t = h_t C_t + D x_t, in
    float32, by chunks of `chunk` tokens (Dao & Gu 2024, the SSD "minimal" form); h_{t-1} = 0
    where token t starts a document of `segment_BL`.

    `dt_BLH` is the time step after softplus and clamping, `a_H` the negative decay rate;
    heads h use group h // (H / G) of B and C. Returns (y [B, L, H, P], final state [B, H, P, N]).
    """
    f32 = jnp.float32
    b, l, h, p = x_BLHP.shape
    g, n = b_BLGN.shape[2], b_BLGN.shape[3]
    r = h // g
    q = min(chunk, l)
    x_BLHP, dt_BLH = x_BLHP.astype(f32), dt_BLH.astype(f32)
    xdt = _chunks((x_BLHP * dt_BLH[..., None]).reshape(b, l, g, r, p), q)  # [B,Z,Q,G,R,P]
    a = _chunks((dt_BLH * a_H.astype(f32)).reshape(b, l, g, r), q)  # [B,Z,Q,G,R]
    bb = _chunks(b_BLGN.astype(f32), q)  # [B,Z,Q,G,N]
    cc = _chunks(c_BLGN.astype(f32), q)
    cs = jnp.cumsum(a, axis=2)  # [B,Z,Q,G,R]
    # Within a chunk: y_l = sum_{s <= l} exp(cs_l - cs_s) (C_l . B_s) xdt_s
    seg = cs[:, :, :, None] - cs[:, :, None, :]  # [B,Z,L,S,G,R]
    causal = jnp.tril(jnp.ones((q, q), bool))[None, None, :, :, None, None]
    # Packed documents: which pairs share a document, which tokens are in the document of the
    # state carried into their chunk, and which in the document the chunk ends in.
    carried = ends = jnp.ones((1, 1, q, 1, 1), bool)
    if segment_BL is not None:
        sz = jnp.pad(segment_BL, [(0, 0), (0, (-l) % q)], mode="edge").reshape(b, -1, q)
        before = jnp.concatenate([sz[:, :1, :1], sz[:, :-1, -1:]], axis=1)  # [B,Z,1]
        causal = causal & (sz[:, :, :, None] == sz[:, :, None, :])[..., None, None]
        carried = (sz == before)[..., None, None]  # [B,Z,Q,1,1]
        ends = (sz == sz[:, :, -1:])[..., None, None]
    decay_LS = jnp.where(causal, jnp.exp(jnp.where(causal, seg, 0.0)), 0.0)
    scores = jnp.einsum("bzlgn,bzsgn->bzlsg", cc, bb)
    y_diag = jnp.einsum("bzlsg,bzlsgr,bzsgrp->bzlgrp", scores, decay_LS, xdt)
    # Each chunk's contribution to the state at its end, and the decay across a whole chunk.
    to_end = jnp.where(ends, jnp.exp(cs[:, :, -1:] - cs), 0.0)  # [B,Z,Q,G,R]
    chunk_states = jnp.einsum("bzlgn,bzlgr,bzlgrp->bzgrpn", bb, to_end, xdt)
    chunk_decay = jnp.where(carried[:, :, -1], jnp.exp(cs[:, :, -1]), 0.0)  # [B,Z,G,R]
    if state_BHPN is None:
        state_BHPN = jnp.zeros((b, h, p, n), f32)
    init = state_BHPN.astype(f32).reshape(b, g, r, p, n)

    def step(state, inputs):
        new, decay = inputs
        return state * decay[..., None, None] + new, state

    final, starts = jax.lax.scan(
        step, init, (jnp.moveaxis(chunk_states, 1, 0), jnp.moveaxis(chunk_decay, 1, 0))
    )
    starts = jnp.moveaxis(starts, 0, 1)  # [B,Z,G,R,P,N]: the state before each chunk
    y_off = jnp.einsum(
        "bzlgn,bzgrpn,bzlgr->bzlgrp", cc, starts, jnp.where(carried, jnp.exp(cs), 0.0)
    )
    y = (y_diag + y_off).reshape(b, -1, h, p)[:, :l]
    y = y + x_BLHP * d_H.astype(f32)[:, None]
    return y, final.reshape(b, h, p, n)


def selective_scan(
    u_BLD: jax.Array,
    dt_BLD: jax.Array,
    a_DN: jax.Array,
    b_BLN: jax.Array,
    c_BLN: jax.Array,
    d_D: jax.Array,
    chunk: int,
    state_BDN: jax.Array | None = None,
    segment_BL: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Mamba-1's scan h_t = exp(dt_t a) h_{t-1} + dt_t u_t B_t, y_t = h_t C_t + D u_t with a
    decay per channel and state dimension (0 where token t starts a document of `segment_BL`),
    in float32: an associative scan inside chunks of
    `chunk` tokens, a `lax.scan` carrying the state across them (memory [B, Q, D, N] per
    chunk, not per sequence). Returns (y [B, L, D], final state [B, D, N])."""
    f32 = jnp.float32
    b, l, d = u_BLD.shape
    n = a_DN.shape[1]
    q = min(chunk, l)
    u_BLD, dt_BLD, a_DN = u_BLD.astype(f32), dt_BLD.astype(f32), a_DN.astype(f32)
    # 1 where the token continues the previous token's document, 0 where a document starts.
    keeps = jnp.ones((b, l), f32)
    if segment_BL is not None:
        keeps = keeps.at[:, 1:].set((segment_BL[:, 1:] == segment_BL[:, :-1]).astype(f32))
    # Padding past the end keeps the state (dt = 0 there: decay 1, nothing added).
    keeps = jnp.pad(keeps, [(0, 0), (0, (-l) % q)], constant_values=1.0)
    xs = [
        jnp.moveaxis(_chunks(t.astype(f32), q), 1, 0) for t in (u_BLD, dt_BLD, b_BLN, c_BLN, keeps)
    ]
    if state_BDN is None:
        state_BDN = jnp.zeros((b, d, n), f32)

    def combine(left, right):
        return left[0] * right[0], right[0] * left[1] + right[1]

    def step(state, inputs):
        u, dt, bq, cq, keep = inputs  # [B,Q,D], [B,Q,D], [B,Q,N], [B,Q,N], [B,Q]
        decay = jnp.exp(dt[..., None] * a_DN) * keep[:, :, None, None]  # [B,Q,D,N]
        push = (dt * u)[..., None] * bq[:, :, None, :]
        total, local = jax.lax.associative_scan(combine, (decay, push), axis=1)
        states = total * state[:, None] + local
        return states[:, -1], jnp.einsum("bqdn,bqn->bqd", states, cq)

    final, ys = jax.lax.scan(step, state_BDN.astype(f32), xs)
    y = jnp.moveaxis(ys, 0, 1).reshape(b, -1, d)[:, :l]
    return y + u_BLD * d_D.astype(f32), final
