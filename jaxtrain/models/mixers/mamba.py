"""The Mamba-1 mixer (transformers' `MambaMixer`): input projection to (x, z), a causal
depthwise convolution over x, input-dependent dt (low rank, then projected per channel), B and
C, a selective scan with a decay per channel and state dimension (`ssm_scan.selective_scan`),
the gate silu(z), and the output projection.

Shape letters: B batch, L length, D embed, I inner width, R dt rank, N state size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.layers import fp8
from jaxtrain.models.layers.basic import Dense, make_param
from jaxtrain.models.mixers.mamba2 import SsmCache, clamp_dt, conv_param, init_dt_bias
from jaxtrain.models.mixers.ssm_scan import causal_conv, selective_scan
from jaxtrain.models.spec.block_pattern import ssm_dt_rank, ssm_inner
from jaxtrain.models.spec.hyperparameters import ModelSpec


class MambaMixer(nnx.Module):
    """Selective state-space mixing with a decay per channel (Mamba-1, S6)."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        self.spec = spec
        d, di, r, n = spec.hidden_size, ssm_inner(spec), ssm_dt_rank(spec), spec.ssm_state_size
        pd = spec.jnp_param_dtype
        common = dict(rngs=rngs, dtype=spec.jnp_dtype, param_dtype=pd)
        self.in_proj = Dense(
            (d,),
            (2 * di,),
            ("embed",),
            ("ssm_proj",),
            std=spec.init_std,
            use_bias=spec.ssm_proj_bias,
            fp8=fp8.recipe(spec),
            **common,
        )
        self.conv_weight = conv_param(rngs, di, spec)
        self.conv_bias = (
            make_param(rngs, (di,), ("ssm_inner",), 0.0, pd) if spec.ssm_conv_bias else None
        )
        self.x_proj = Dense(
            (di,), (r + 2 * n,), ("ssm_inner",), ("ssm_state",), std=spec.init_std, **common
        )
        self.dt_proj = Dense(
            (r,), (di,), ("ssm_state",), ("ssm_inner",), std=r**-0.5, use_bias=True, **common
        )
        self.dt_proj.bias[...] = init_dt_bias(rngs, di, spec).astype(pd)
        a = jnp.broadcast_to(jnp.arange(1, n + 1, dtype=jnp.float32), (di, n))
        self.a_log = nnx.Param(jnp.log(a).astype(pd), logical_axes=("ssm_inner", "ssm_state"))
        self.d = nnx.Param(jnp.ones((di,), pd), logical_axes=("ssm_inner",))
        self.out_proj = Dense(
            (di,),
            (d,),
            ("ssm_inner",),
            ("embed",),
            std=spec.init_std,
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
        di, r, n = ssm_inner(spec), ssm_dt_rank(spec), spec.ssm_state_size
        x_BLI, z_BLI = jnp.split(self.in_proj(x_BLD), [di], axis=-1)
        conv_bias = None if self.conv_bias is None else self.conv_bias[...]
        x_BLI, conv_state = causal_conv(
            x_BLI,
            self.conv_weight[...],
            conv_bias,
            None if cache is None else cache["conv"],
            segment_BL,
        )
        x_BLI = jax.nn.silu(x_BLI)
        dt_BLR, b_BLN, c_BLN = jnp.split(self.x_proj(x_BLI), [r, r + n], axis=-1)
        dt_BLI = jax.nn.softplus(self.dt_proj(dt_BLR).astype(jnp.float32))
        a_IN = -jnp.exp(self.a_log[...].astype(jnp.float32))
        y_BLI, state = selective_scan(
            x_BLI,
            clamp_dt(dt_BLI, spec),
            a_IN,
            b_BLN,
            c_BLN,
            self.d[...],
            spec.ssm_chunk_size,
            None if cache is None else cache["ssm"],
            segment_BL,
        )
        y_BLI = y_BLI * jax.nn.silu(z_BLI.astype(jnp.float32))
        out_BLD = self.out_proj(y_BLI.astype(spec.jnp_dtype))
        if cache is None:
            return out_BLD, None
        return out_BLD, {
            "conv": conv_state.astype(cache["conv"].dtype),
            "ssm": state.astype(cache["ssm"].dtype),
        }
