"""Gated DeltaNet (Yang, Kautz, Hatamizadeh 2024, "Gated Delta Networks: Improving Mamba2 with
Delta Rule"): a token mixer whose state is written by the delta rule and decayed by one
Mamba-2-style gate per head and token.

Shape letters: B batch, L length, D embed, N query/key heads, H value heads (a multiple of N:
grouped value heads), K key head width, V value head width.

Per token: q, k, v = silu(short_conv(x W_q|k|v)); q, k L2-normalized per head, q scaled by
1/sqrt(K); beta = sigmoid(x W_b); g = -exp(A_log) softplus(x W_a + dt_bias) (log decay, per
value head); o = delta_rule(q, k, v, g, beta) (`delta_rule.py`); y = (rmsnorm(o) w x silu(x
W_g)) W_o, or (rmsnorm(o) w) W_o without the output gate.

Two published layouts compute this, and this module holds the math once with FLA's separate
projections (what Primus' Zebra-Llama GDN layers use):

- FLA `GatedDeltaNet` / Primus (Megatron) Zebra-Llama: separate q/k/v/a/b/g projections,
  separate q/k/v short convs (optional: `linear_short_conv`; without them q, k, v are
  silu(projection)), the output gate optional (`linear_output_gate`), conv bias optional (not
  supported here: Zebra-Llama has none).
- transformers `Qwen3NextGatedDeltaNet`: q, k, v and the gate z fused into one `in_proj_qkvz`
  and b, a into one `in_proj_ba`, both laid out per key-head group ([q_n, k_n, v_group_n,
  z_group_n] for each key head n); one conv over the concatenated q|k|v channels (depthwise, so
  the same as three); always a short conv and a silu output gate; no biases. The same numbers,
  only fused: converting splits the fused weights (tests/test_gated_delta.py does).

Neither has a rotary embedding; both use grouped value heads (value head i reads key head
i // (H / N)), the same gate and L2 norm (eps 1e-6 inside the root).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.layers.basic import Dense
from jaxtrain.models.mixers import linear_mixer
from jaxtrain.models.mixers.linear_mixer import LinearCache
from jaxtrain.models.spec.delta_sizes import GDN_DEFAULT_CHUNK
from jaxtrain.models.spec.hyperparameters import ModelSpec

_HEADS = ("heads", "head_dim")


def inverse_softplus_dt(rngs: nnx.Rngs, size: int | tuple[int, ...], dtype) -> nnx.Param:
    """Mamba's dt_bias init: softplus(dt_bias) = dt, log-uniform in [1e-3, 1e-1]."""
    shape = (size,) if isinstance(size, int) else size
    u = jax.random.uniform(rngs.params(), shape, jnp.float32)
    dt = jnp.maximum(jnp.exp(u * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)), 1e-4)
    names = ("heads",) if len(shape) == 1 else _HEADS
    return nnx.Param((dt + jnp.log(-jnp.expm1(-dt))).astype(dtype), logical_axes=names)


def log_uniform_a(rngs: nnx.Rngs, heads: int, dtype) -> nnx.Param:
    """A_log with A uniform in [1, 16] (per head decay rates, as Mamba-2 and KDA)."""
    a = jax.random.uniform(rngs.params(), (heads,), jnp.float32, 1.0, 16.0)
    return nnx.Param(jnp.log(a).astype(dtype), logical_axes=("heads",))


class GatedDeltaNet(linear_mixer.DeltaRuleMixer):
    """Gated DeltaNet token mixer: x [B, L, D] -> [B, L, D], plus a decoding cache."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        self.spec = spec
        self.chunk = spec.linear_chunk or GDN_DEFAULT_CHUNK
        d, n, h = spec.hidden_size, spec.linear_num_key_heads, spec.linear_num_value_heads
        kd, vd = spec.linear_key_head_dim, spec.linear_value_head_dim
        common = dict(
            rngs=rngs, std=spec.init_std, dtype=spec.jnp_dtype, param_dtype=spec.jnp_param_dtype
        )
        self.q_proj = Dense((d,), (n, kd), ("embed",), _HEADS, **common)
        self.k_proj = Dense((d,), (n, kd), ("embed",), _HEADS, **common)
        self.v_proj = Dense((d,), (h, vd), ("embed",), _HEADS, **common)
        self.a_proj = Dense((d,), (h,), ("embed",), ("heads",), **common)
        self.b_proj = Dense((d,), (h,), ("embed",), ("heads",), **common)
        self.A_log = log_uniform_a(rngs, h, spec.jnp_param_dtype)
        self.dt_bias = inverse_softplus_dt(rngs, h, spec.jnp_param_dtype)
        linear_mixer.make_convs(self, spec, rngs)
        if spec.linear_output_gate:
            self.g_proj = Dense((d,), (h, vd), ("embed",), _HEADS, **common)
        self.o_norm = linear_mixer.GatedRMSNorm(vd, spec.norm_eps, param_dtype=spec.jnp_param_dtype)
        self.o_proj = Dense((h, vd), (d,), _HEADS, ("embed",), **common)

    def _mix(
        self, x_BLD: jax.Array, cache: LinearCache | None, segment_BL: jax.Array | None
    ) -> tuple[jax.Array, LinearCache]:
        q, k, v, conv_states = linear_mixer.conv_qkv(
            self, self.q_proj(x_BLD), self.k_proj(x_BLD), self.v_proj(x_BLD), cache, segment_BL
        )
        beta_BLH = jax.nn.sigmoid(self.b_proj(x_BLD).astype(jnp.float32))
        a_BLH = self.a_proj(x_BLD).astype(jnp.float32)
        g_BLH = -jnp.exp(self.A_log[...].astype(jnp.float32)) * jax.nn.softplus(
            a_BLH + self.dt_bias[...].astype(jnp.float32)
        )
        o_BLHV, state = linear_mixer.run_delta_rule(
            q, k, v, g_BLH, beta_BLH, self.chunk, None if cache is None else cache.state, segment_BL
        )
        gate = self.g_proj(x_BLD) if hasattr(self, "g_proj") else None
        o_BLHV = self.o_norm(o_BLHV, gate, jax.nn.silu).astype(self.spec.jnp_dtype)
        return self.o_proj(o_BLHV), LinearCache(*conv_states, state)
