"""The norm a block applies, by `model.norm_type`: RMSNorm (`basic.RMSNorm`), or LayerNorm with
a bias, as GPT-2 and MaxText's GPT-3 have it.

Both compute in float32 and both honour `model.norm_zero_centered` (a scale of 1 + weight).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.layers.basic import RMSNorm
from jaxtrain.models.spec.hyperparameters import ModelSpec


class LayerNorm(nnx.Module):
    """(x - mean) / sqrt(var + eps) x scale + bias over the last dimension, in float32; the
    scale starts at 1 (at 0 and used as 1 + weight when `zero_centered`, as MaxText's GPT-3
    stores it), the bias at 0."""

    def __init__(
        self,
        size: int,
        eps: float,
        *,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        zero_centered: bool = False,
    ):
        self.eps = eps
        self.dtype = dtype
        self.zero_centered = zero_centered
        init = jnp.zeros if zero_centered else jnp.ones
        self.scale = nnx.Param(init((size,), param_dtype), logical_axes=("norm",))
        self.bias = nnx.Param(jnp.zeros((size,), param_dtype), logical_axes=("norm",))

    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x32 = x.astype(jnp.float32)
        centered = x32 - jnp.mean(x32, axis=-1, keepdims=True)
        variance = jnp.mean(centered * centered, axis=-1, keepdims=True)
        normed = centered * jax.lax.rsqrt(variance + self.eps)
        scale = self.scale[...].astype(jnp.float32)
        if self.zero_centered:
            scale = scale + 1.0
        return (normed * scale + self.bias[...].astype(jnp.float32)).astype(self.dtype)


def make_norm(spec: ModelSpec) -> RMSNorm | LayerNorm:
    """A norm over the hidden size of the kind, epsilon and dtypes the spec names."""
    kind = LayerNorm if spec.norm_type == "layer" else RMSNorm
    return kind(
        spec.hidden_size,
        spec.norm_eps,
        dtype=spec.jnp_dtype,
        param_dtype=spec.jnp_param_dtype,
        zero_centered=spec.norm_zero_centered,
    )
