"""The SwiGLU feed-forward block: down(silu(gate(x)) * up(x)).

Shape letters: B batch, L length, D embed, F hidden (intermediate) size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain import sharding
from jaxtrain.models.layers import Dense
from jaxtrain.models.spec import ModelSpec


class SwiGLU(nnx.Module):
    """Gated MLP with SiLU, as in Llama, Qwen and Mistral."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs, intermediate_size: int = 0):
        # intermediate_size overrides the spec's (a mixture of experts' shared experts).
        d, f = spec.hidden_size, intermediate_size or spec.intermediate_size
        common = dict(rngs=rngs, std=spec.init_std, dtype=spec.jnp_dtype,
                      param_dtype=spec.jnp_param_dtype)
        self.gate_proj = Dense((d,), (f,), ("embed",), ("mlp",), **common)
        self.up_proj = Dense((d,), (f,), ("embed",), ("mlp",), **common)
        self.down_proj = Dense((f,), (d,), ("mlp",), ("embed",), **common)

    def __call__(self, x_BLD: jnp.ndarray) -> jnp.ndarray:
        h_BLF = jax.nn.silu(self.gate_proj(x_BLD)) * self.up_proj(x_BLD)
        h_BLF = sharding.constrain(h_BLF, ("activation_batch", "activation_length",
                                           "activation_mlp"))
        return self.down_proj(h_BLF)
