"""What the delta-rule token mixers (Gated DeltaNet, Kimi delta attention) share: the causal
depthwise "short" convolution on queries, keys and values, the gated output norm, the decoding
cache, and the path from normalized q/k/v and gates through the delta rule.

Shape letters: B batch, L length, N heads, X head width, W conv taps, H value heads, K key head
width, V value head width.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.mixers import delta_rule
from jaxtrain.models.spec.hyperparameters import ModelSpec


class LinearCache(NamedTuple):
    """A delta-rule mixer's decoding state: the last W - 1 inputs of each short conv (zero-width
    without convs) and the recurrent state [B, H, K, V] (float32)."""

    q_conv: jax.Array
    k_conv: jax.Array
    v_conv: jax.Array
    state: jax.Array


class DeltaRuleMixer(nnx.Module):
    """What every delta-rule mixer (Gated DeltaNet, KDA) offers the hybrid stack: a whole-sequence
    call, an empty decoding cache, and decoding from a cache. Subclasses set `self.spec` and
    implement `_mix(x_BLD, cache, segment_BL) -> (y_BLD, cache after x)`."""

    def __call__(self, x_BLD: jax.Array, segment_BL: jax.Array | None = None) -> jax.Array:
        """The mixer's output [B, L, D] for a whole sequence (training, evaluation); packed
        documents in `segment_BL` do not see each other."""
        return self._mix(x_BLD, None, segment_BL)[0]

    def init_cache(self, batch_size: int) -> LinearCache:
        """An empty decoding cache (conv inputs and recurrent state of nothing seen yet)."""
        return init_cache(self.spec, batch_size, self.spec.jnp_dtype)

    def decode(self, x_BLD: jax.Array, cache: LinearCache) -> tuple[jax.Array, LinearCache]:
        """Continues from `cache`: a prompt (L > 1, chunked) or one sampled token (L = 1, the
        recurrent step); returns the output and the cache after x."""
        return self._mix(x_BLD, cache, None)

    def _mix(
        self, x_BLD: jax.Array, cache: LinearCache | None, segment_BL: jax.Array | None
    ) -> tuple[jax.Array, LinearCache]:
        raise NotImplementedError


class ShortConv(nnx.Module):
    """Causal depthwise conv over time with W taps, then silu: y_t = silu(sum_w c_w x_{t-W+1+w}).

    The weight is [W, N, X] (transformers' and FLA's conv1d weight [N x X, 1, W], transposed);
    the taps dimension is left unnamed (replicated: a few numbers per channel), heads split as
    the projections feeding it.
    """

    def __init__(self, taps: int, heads: int, width: int, *, rngs: nnx.Rngs, param_dtype):
        bound = taps**-0.5  # torch's Conv1d default init, fan_in = taps for a depthwise conv
        value = jax.random.uniform(rngs.params(), (taps, heads, width), param_dtype, -bound, bound)
        self.weight = nnx.Param(value, logical_axes=(None, "heads", "head_dim"))

    def __call__(
        self,
        x_BLNX: jax.Array,
        state_BWNX: jax.Array | None = None,
        segment_BL: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """(silu(conv(x)), the last W - 1 inputs); `state_BWNX` holds the inputs before x
        (zeros when None); a tap never reads across a document boundary of `segment_BL`."""
        w = self.weight[...]
        taps, (b, length) = w.shape[0], x_BLNX.shape[:2]
        if state_BWNX is None:
            state_BWNX = jnp.zeros((b, taps - 1, *x_BLNX.shape[2:]), x_BLNX.dtype)
        xp = jnp.concatenate([state_BWNX.astype(x_BLNX.dtype), x_BLNX], axis=1)
        segp = None
        if segment_BL is not None:
            segp = jnp.pad(segment_BL, [(0, 0), (taps - 1, 0)], constant_values=-1)
        y = jnp.zeros(x_BLNX.shape, jnp.float32)
        for tap in range(taps):  # W is 2-4: a handful of fused multiply-adds
            term = xp[:, tap : tap + length].astype(jnp.float32) * w[tap].astype(jnp.float32)
            if segp is not None:
                same = segp[:, tap : tap + length] == segment_BL
                term = jnp.where(same[:, :, None, None], term, 0.0)
            y = y + term
        return jax.nn.silu(y).astype(x_BLNX.dtype), xp[:, xp.shape[1] - (taps - 1) :]


class GatedRMSNorm(nnx.Module):
    """RMS norm of each head's output times a learned [V] weight, times act(gate) when a gate
    is given: FLA's `FusedRMSNormGated` (silu for Gated DeltaNet, sigmoid for KDA) and plain
    `RMSNorm` without one."""

    def __init__(self, size: int, eps: float, *, param_dtype):
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((size,), param_dtype), logical_axes=("norm",))

    def __call__(
        self, x: jax.Array, gate: jax.Array | None = None, activation=jax.nn.silu
    ) -> jax.Array:
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        y = y * self.scale[...].astype(jnp.float32)
        if gate is not None:
            y = y * activation(gate.astype(jnp.float32))
        return y


def make_convs(module: nnx.Module, spec: ModelSpec, rngs: nnx.Rngs) -> None:
    """Gives `module` its q/k/v short convs when `model.linear_short_conv` is on."""
    if not spec.linear_short_conv:
        return
    taps, dtype = spec.linear_conv_kernel, spec.jnp_param_dtype
    h, hv = spec.linear_num_key_heads, spec.linear_num_value_heads
    module.q_conv = ShortConv(taps, h, spec.linear_key_head_dim, rngs=rngs, param_dtype=dtype)
    module.k_conv = ShortConv(taps, h, spec.linear_key_head_dim, rngs=rngs, param_dtype=dtype)
    module.v_conv = ShortConv(taps, hv, spec.linear_value_head_dim, rngs=rngs, param_dtype=dtype)


def conv_qkv(
    module: nnx.Module,
    q_BLNK: jax.Array,
    k_BLNK: jax.Array,
    v_BLHV: jax.Array,
    cache: LinearCache | None,
    segment_BL: jax.Array | None,
) -> tuple[jax.Array, jax.Array, jax.Array, tuple[jax.Array, ...]]:
    """q, k, v through the module's short convs (silu alone without them, as FLA does) and the
    convs' new decoding states."""
    if not hasattr(module, "q_conv"):
        empty = tuple(x[:, :0] for x in (q_BLNK, k_BLNK, v_BLHV))
        return (*(jax.nn.silu(x) for x in (q_BLNK, k_BLNK, v_BLHV)), empty)
    states = (None, None, None) if cache is None else (cache.q_conv, cache.k_conv, cache.v_conv)
    q, q_state = module.q_conv(q_BLNK, states[0], segment_BL)
    k, k_state = module.k_conv(k_BLNK, states[1], segment_BL)
    v, v_state = module.v_conv(v_BLHV, states[2], segment_BL)
    return q, k, v, (q_state, k_state, v_state)


def run_delta_rule(
    q_BLNK: jax.Array,
    k_BLNK: jax.Array,
    v_BLHV: jax.Array,
    g: jax.Array,
    beta_BLH: jax.Array,
    chunk: int,
    state_BHKV: jax.Array | None,
    segment_BL: jax.Array | None,
) -> tuple[jax.Array, jax.Array]:
    """L2-normalized, scaled queries and keys, each shared by H / N value heads (grouped value
    heads: value head i reads key head i // (H / N), transformers' `repeat_interleave`), through
    the delta rule: (o [B, L, H, V] float32, final state). One token with a state takes the
    recurrent step; anything else the chunked form."""
    group = v_BLHV.shape[2] // q_BLNK.shape[2]
    q = delta_rule.l2_normalize(q_BLNK) * q_BLNK.shape[-1] ** -0.5
    k = delta_rule.l2_normalize(k_BLNK)
    if group > 1:
        q, k = (jnp.repeat(x, group, axis=2) for x in (q, k))
    if state_BHKV is not None and q.shape[1] == 1:
        g_BHk = g[:, 0] if g.ndim == 4 else g[:, 0, :, None]
        o_BHV, state = delta_rule.recurrent_step(
            q[:, 0], k[:, 0], v_BLHV[:, 0], g_BHk, beta_BLH[:, 0], state_BHKV
        )
        return o_BHV[:, None], state
    return delta_rule.chunked_delta_rule(
        q, k, v_BLHV, g, beta_BLH, chunk=chunk, state_BHKV=state_BHKV, segment_BL=segment_BL
    )


def init_cache(spec: ModelSpec, batch_size: int, dtype=jnp.float32) -> LinearCache:
    """An empty decoding cache for one delta-rule mixer of `spec` (conv states in `dtype`, the
    recurrent state in float32)."""
    taps = spec.linear_conv_kernel - 1 if spec.linear_short_conv else 0
    h, hv = spec.linear_num_key_heads, spec.linear_num_value_heads
    kd, vd = spec.linear_key_head_dim, spec.linear_value_head_dim
    return LinearCache(
        q_conv=jnp.zeros((batch_size, taps, h, kd), dtype),
        k_conv=jnp.zeros((batch_size, taps, h, kd), dtype),
        v_conv=jnp.zeros((batch_size, taps, hv, vd), dtype),
        state=jnp.zeros((batch_size, hv, kd, vd), jnp.float32),
    )
