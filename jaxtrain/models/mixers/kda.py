"""Kimi delta attention (KDA; Kimi Team 2025, "Kimi Linear: An Expressive, Efficient Attention
Architecture"): Gated DeltaNet with a decay per key channel instead of one per head, from a
low-rank forget-gate projection, and a sigmoid low-rank output gate.

Shape letters: B batch, L length, D embed, N query/key heads, H value heads (a multiple of N),
K key head width, V value head width, R gate bottleneck (= V).

Per token: q, k, v = silu(short_conv(x W_q|k|v)); q, k L2-normalized per head, q scaled by
1/sqrt(K); beta = sigmoid(x W_b) per value head; g = -exp(A_log) softplus(x W_fa W_fb +
dt_bias), [H, K] (A_log per head, dt_bias per head and channel); o = delta_rule(q, k, v, g,
beta); y = (rmsnorm(o) w x sigmoid(x W_ga W_gb (+ b_g))) W_o.

Layouts that compute this:

- FLA `KimiDeltaAttention` / Primus (Megatron) Zebra-Llama KDA: separate q/k/v projections and
  short convs, key and value head widths free (`expand_v`: Zebra-Llama K = 32, V = 64),
  grouped value heads allowed, both gate bottlenecks R = V wide, a bias on the output gate's
  second projection (`linear_gate_bias=True`).
- transformers `KimiLinearDeltaAttention` (Kimi Linear 48B): one width for keys and values
  (`linear_head_dim`) and one head count, one conv over q|k|v (depthwise: the same as three),
  no output gate bias (`linear_gate_bias=False`); R = the head width, as FLA's R = V then.
  FLA's optional `lower_bound` / `safe_gate` variant of the gate is not implemented.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.layers.basic import Dense
from jaxtrain.models.mixers import linear_mixer
from jaxtrain.models.mixers.gated_delta import inverse_softplus_dt, log_uniform_a
from jaxtrain.models.mixers.linear_mixer import LinearCache
from jaxtrain.models.spec.delta_sizes import KDA_DEFAULT_CHUNK
from jaxtrain.models.spec.hyperparameters import ModelSpec

_HEADS = ("heads", "head_dim")


class KimiDeltaAttention(linear_mixer.DeltaRuleMixer):
    """Kimi delta attention token mixer: x [B, L, D] -> [B, L, D], plus a decoding cache."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        self.spec = spec
        self.chunk = spec.linear_chunk or KDA_DEFAULT_CHUNK
        d, n, h = spec.hidden_size, spec.linear_num_key_heads, spec.linear_num_value_heads
        kd, vd = spec.linear_key_head_dim, spec.linear_value_head_dim
        common = dict(
            rngs=rngs, std=spec.init_std, dtype=spec.jnp_dtype, param_dtype=spec.jnp_param_dtype
        )
        self.q_proj = Dense((d,), (n, kd), ("embed",), _HEADS, **common)
        self.k_proj = Dense((d,), (n, kd), ("embed",), _HEADS, **common)
        self.v_proj = Dense((d,), (h, vd), ("embed",), _HEADS, **common)
        linear_mixer.make_convs(self, spec, rngs)
        # The gate bottlenecks are narrow (R = V): kept whole, like MLA's latents.
        self.f_a_proj = Dense((d,), (vd,), ("embed",), ("latent",), **common)
        self.f_b_proj = Dense((vd,), (h, kd), ("latent",), _HEADS, **common)
        self.b_proj = Dense((d,), (h,), ("embed",), ("heads",), **common)
        self.A_log = log_uniform_a(rngs, h, spec.jnp_param_dtype)
        self.dt_bias = inverse_softplus_dt(rngs, (h, kd), spec.jnp_param_dtype)
        self.g_a_proj = Dense((d,), (vd,), ("embed",), ("latent",), **common)
        self.g_b_proj = Dense(
            (vd,), (h, vd), ("latent",), _HEADS, use_bias=spec.linear_gate_bias, **common
        )
        self.o_norm = linear_mixer.GatedRMSNorm(vd, spec.norm_eps, param_dtype=spec.jnp_param_dtype)
        self.o_proj = Dense((h, vd), (d,), _HEADS, ("embed",), **common)

    def _mix(
        self, x_BLD: jax.Array, cache: LinearCache | None, segment_BL: jax.Array | None
    ) -> tuple[jax.Array, LinearCache]:
        q, k, v, conv_states = linear_mixer.conv_qkv(
            self, self.q_proj(x_BLD), self.k_proj(x_BLD), self.v_proj(x_BLD), cache, segment_BL
        )
        beta_BLH = jax.nn.sigmoid(self.b_proj(x_BLD).astype(jnp.float32))
        f_BLHK = self.f_b_proj(self.f_a_proj(x_BLD)).astype(jnp.float32)
        a_H1 = jnp.exp(self.A_log[...].astype(jnp.float32))[:, None]
        g_BLHK = -a_H1 * jax.nn.softplus(f_BLHK + self.dt_bias[...].astype(jnp.float32))
        o_BLHV, state = linear_mixer.run_delta_rule(
            q,
            k,
            v,
            g_BLHK,
            beta_BLH,
            self.chunk,
            None if cache is None else cache.state,
            segment_BL,
        )
        gate_BLHV = self.g_b_proj(self.g_a_proj(x_BLD))
        o_BLHV = self.o_norm(o_BLHV, gate_BLHV, jax.nn.sigmoid).astype(self.spec.jnp_dtype)
        return self.o_proj(o_BLHV), LinearCache(*conv_states, state)
