"""The Mamba-2 mixer (Megatron's `MambaMixer`, transformers' `Mamba2Mixer`): one input
projection to (z, x, B, C, dt), a causal depthwise convolution over (x, B, C), the SSD scan
(`ssm_scan.ssd_scan`), a gated group RMSNorm and the output projection.

Shape letters: B batch, L length, D embed, I inner width (H heads x P head width), G groups,
N state size, C convolution channels (I + 2 G N), K convolution width.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.layers import fp8
from jaxtrain.models.layers.basic import Dense, make_param
from jaxtrain.models.mixers.ssm_scan import causal_conv, ssd_scan
from jaxtrain.models.spec.block_pattern import conv_channels, ssm_heads, ssm_inner
from jaxtrain.models.spec.hyperparameters import ModelSpec

# {"conv": the last K - 1 convolution inputs [B, K-1, C], "ssm": the scan state [B, H, P, N]}
SsmCache = dict[str, jax.Array]


def init_dt_bias(rngs: nnx.Rngs, size: int, spec: ModelSpec) -> jax.Array:
    """softplus^-1 of time steps drawn log-uniformly in [dt_min, dt_max] (floored), as Mamba
    initialises them, so softplus(dt_bias) starts at those steps."""
    u = jax.random.uniform(rngs.params(), (size,), jnp.float32)
    lo, hi = math.log(spec.ssm_dt_min), math.log(spec.ssm_dt_max)
    dt = jnp.maximum(jnp.exp(u * (hi - lo) + lo), spec.ssm_dt_floor)
    return dt + jnp.log(-jnp.expm1(-dt))


def conv_param(rngs: nnx.Rngs, channels: int, spec: ModelSpec) -> nnx.Param:
    """The depthwise convolution's weight [C, K] (channel first, as checkpoints store it)."""
    k = spec.ssm_conv_kernel
    bound = k**-0.5
    value = jax.random.uniform(rngs.params(), (channels, k), jnp.float32, -bound, bound)
    return nnx.Param(value.astype(spec.jnp_param_dtype), logical_axes=("ssm_conv", "ssm_state"))


def clamp_dt(dt: jax.Array, spec: ModelSpec) -> jax.Array:
    """The time step's limits (`ssm_dt_limit_min` / `_max`; a max of 0 means none)."""
    if spec.ssm_dt_limit_min > 0 or spec.ssm_dt_limit_max > 0:
        dt = jnp.clip(dt, spec.ssm_dt_limit_min, spec.ssm_dt_limit_max or None)
    return dt


class Mamba2Mixer(nnx.Module):
    """Selective state-space mixing with a scalar decay per head (Mamba-2 / SSD)."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        self.spec = spec
        d, di, h = spec.hidden_size, ssm_inner(spec), ssm_heads(spec)
        g, n = spec.ssm_n_groups, spec.ssm_state_size
        c = conv_channels(spec)
        common = dict(
            rngs=rngs, std=spec.init_std, dtype=spec.jnp_dtype, param_dtype=spec.jnp_param_dtype
        )
        self.in_proj = Dense(
            (d,),
            (2 * di + 2 * g * n + h,),
            ("embed",),
            ("ssm_proj",),
            use_bias=spec.ssm_proj_bias,
            fp8=fp8.recipe(spec),
            **common,
        )
        self.conv_weight = conv_param(rngs, c, spec)
        self.conv_bias = (
            make_param(rngs, (c,), ("ssm_conv",), 0.0, spec.jnp_param_dtype)
            if spec.ssm_conv_bias
            else None
        )
        pd = spec.jnp_param_dtype
        self.dt_bias = nnx.Param(
            init_dt_bias(rngs, h, spec).astype(pd), logical_axes=("ssm_heads",)
        )
        self.a_log = nnx.Param(
            jnp.log(jnp.arange(1, h + 1, dtype=jnp.float32)).astype(pd), logical_axes=("ssm_heads",)
        )
        self.d = nnx.Param(jnp.ones((h,), pd), logical_axes=("ssm_heads",))
        self.norm_scale = nnx.Param(jnp.ones((di,), pd), logical_axes=("ssm_inner",))
        self.out_proj = Dense(
            (di,),
            (d,),
            ("ssm_inner",),
            ("embed",),
            use_bias=spec.ssm_proj_bias,
            fp8=fp8.recipe(spec),
            **common,
        )

    def __call__(
        self,
        x_BLD: jax.Array,
        cache: SsmCache | None = None,
        segment_BL: jax.Array | None = None,
    ) -> tuple[jax.Array, SsmCache | None]:
        """(output, the cache after x when one is given); the conv and the scan restart at each
        document of `segment_BL` (packed documents)."""
        spec = self.spec
        b, l, _ = x_BLD.shape
        di, h, p = ssm_inner(spec), ssm_heads(spec), spec.ssm_head_dim
        g, n = spec.ssm_n_groups, spec.ssm_state_size
        zxbcdt = self.in_proj(x_BLD)
        z_BLI, xbc_BLC, dt_BLH = jnp.split(zxbcdt, [di, 2 * di + 2 * g * n], axis=-1)
        conv_bias = None if self.conv_bias is None else self.conv_bias[...]
        xbc_BLC, conv_state = causal_conv(
            xbc_BLC,
            self.conv_weight[...],
            conv_bias,
            None if cache is None else cache["conv"],
            segment_BL,
        )
        xbc_BLC = jax.nn.silu(xbc_BLC)
        x_BLI, b_BLGN, c_BLGN = jnp.split(xbc_BLC, [di, di + g * n], axis=-1)
        dt_BLH = jax.nn.softplus(dt_BLH.astype(jnp.float32) + self.dt_bias[...].astype(jnp.float32))
        a_H = -jnp.exp(self.a_log[...].astype(jnp.float32))
        y_BLHP, state = ssd_scan(
            x_BLI.reshape(b, l, h, p),
            clamp_dt(dt_BLH, spec),
            a_H,
            b_BLGN.reshape(b, l, g, n),
            c_BLGN.reshape(b, l, g, n),
            self.d[...],
            spec.ssm_chunk_size,
            None if cache is None else cache["ssm"],
            segment_BL,
        )
        y_BLI = gated_norm(y_BLHP.reshape(b, l, di), z_BLI, self.norm_scale[...], g, spec.norm_eps)
        out_BLD = self.out_proj(y_BLI.astype(spec.jnp_dtype))
        if cache is None:
            return out_BLD, None
        return out_BLD, {
            "conv": conv_state.astype(cache["conv"].dtype),
            "ssm": state.astype(cache["ssm"].dtype),
        }


def gated_norm(
    y_BLI: jax.Array, z_BLI: jax.Array, scale_I: jax.Array, groups: int, eps: float
) -> jax.Array:
    """RMSNorm of y x silu(z) over each of `groups` equal slices of the channels, in float32,
    times the learned scale (Mamba-2's norm_before_gate=False)."""
    f32 = jnp.float32
    y = y_BLI.astype(f32) * jax.nn.silu(z_BLI.astype(f32))
    shape = y.shape
    y = y.reshape(*shape[:-1], groups, -1)
    y = y * jax.lax.rsqrt(jnp.mean(y * y, axis=-1, keepdims=True) + eps)
    return y.reshape(shape) * scale_I.astype(f32)


def init_ssm_cache(spec: ModelSpec, batch: int) -> SsmCache:
    """An empty decoding state of one Mamba sublayer (float32: the scan's precision)."""
    k = spec.ssm_conv_kernel
    if spec.mamba_version == 1:
        state = (batch, ssm_inner(spec), spec.ssm_state_size)
    else:
        state = (batch, ssm_heads(spec), spec.ssm_head_dim, spec.ssm_state_size)
    return {
        "conv": jnp.zeros((batch, k - 1, conv_channels(spec)), jnp.float32),
        "ssm": jnp.zeros(state, jnp.float32),
    }
