"""The feed-forward blocks: the gated down(silu(gate(x)) * up(x)) (gelu for Grok's GeGLU), the
ungated down(relu(up(x))^2) of Megatron hybrids and Nemotron-H, and GPT-3's ungated
down(gelu(up(x))).

Shape letters: B batch, L length, D embed, F hidden (intermediate) size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.layers import fp8
from jaxtrain.models.layers.basic import Dense
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.parallel import sharding


@jax.custom_vjp
def swiglu(gate: jax.Array, up: jax.Array) -> jax.Array:
    """silu(gate) x up, with a gradient that keeps sigmoid(gate) and nothing derived from it.

    Autodiff keeps both sigmoid(gate) and silu(gate) for the backward pass. Here the backward
    pass recomputes silu from gate and the sigmoid inside its own elementwise loops, so each
    layer keeps one [tokens, F] tensor fewer between the passes, at no measurable cost in step
    time on CPUs. Recomputing the sigmoid too (keeping only gate and up) was 2-3% slower
    there: the exponential costs more than the memory it saves.
    """
    return jax.nn.silu(gate) * up


def _swiglu_fwd(gate, up):
    sigmoid = jax.nn.sigmoid(gate)
    return gate * sigmoid * up, (gate, up, sigmoid)


def _swiglu_bwd(residuals, dh):
    gate, up, sigmoid = residuals
    # d silu(g) / dg = sigmoid(g) x (1 + g x (1 - sigmoid(g)))
    dgate = dh * up * sigmoid * (1 + gate * (1 - sigmoid))
    dup = dh * (gate * sigmoid)
    return dgate.astype(gate.dtype), dup.astype(up.dtype)


swiglu.defvjp(_swiglu_fwd, _swiglu_bwd)


def geglu(gate: jax.Array, up: jax.Array) -> jax.Array:
    """gelu(gate) x up with the tanh approximation of gelu, as xAI's Grok code computes it
    (`jax.nn.gelu`'s default)."""
    return jax.nn.gelu(gate, approximate=True) * up


GATED_ACTIVATIONS = {"swiglu": swiglu, "geglu": geglu}


def _projection_args(spec: ModelSpec, rngs: nnx.Rngs, use_bias: bool = False) -> dict:
    """The Dense arguments every MLP projection shares: init, dtypes and the fp8 recipe."""
    return dict(
        rngs=rngs,
        std=spec.init_std,
        dtype=spec.jnp_dtype,
        param_dtype=spec.jnp_param_dtype,
        fp8=fp8.recipe(spec),
        use_bias=use_bias,
    )


class SwiGLU(nnx.Module):
    """Gated MLP with SiLU, as in Llama, Qwen and Mistral (GELU with `mlp_activation='geglu'`,
    Grok)."""

    def __init__(
        self, spec: ModelSpec, *, rngs: nnx.Rngs, intermediate_size: int = 0, use_bias: bool = False
    ):
        # intermediate_size overrides the spec's (a mixture of experts' shared experts);
        # use_bias adds biases to all three projections (Llama's mlp_bias).
        d, f = spec.hidden_size, intermediate_size or spec.intermediate_size
        common = _projection_args(spec, rngs, use_bias=use_bias)
        self.gate_proj = Dense((d,), (f,), ("embed",), ("mlp",), **common)
        self.up_proj = Dense((d,), (f,), ("embed",), ("mlp",), **common)
        self.down_proj = Dense((f,), (d,), ("mlp",), ("embed",), **common)
        self.activation = GATED_ACTIVATIONS[spec.mlp_activation]

    def __call__(self, x_BLD: jnp.ndarray) -> jnp.ndarray:
        h_BLF = self.activation(self.gate_proj(x_BLD), self.up_proj(x_BLD))
        h_BLF = sharding.constrain(
            h_BLF, ("activation_batch", "activation_length", "activation_mlp")
        )
        return self.down_proj(h_BLF)


class ReluSquaredMLP(nnx.Module):
    """down(relu(up(x))^2): the ungated MLP of Megatron hybrids and Nemotron-H (and of
    Nemotron-H's shared experts, `intermediate_size` overriding the spec's)."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs, intermediate_size: int = 0):
        d, f = spec.hidden_size, intermediate_size or spec.intermediate_size
        common = _projection_args(spec, rngs)
        self.up_proj = Dense((d,), (f,), ("embed",), ("mlp",), **common)
        self.down_proj = Dense((f,), (d,), ("mlp",), ("embed",), **common)

    def __call__(self, x_BLD: jax.Array) -> jax.Array:
        h_BLF = jnp.square(jax.nn.relu(self.up_proj(x_BLD)))
        h_BLF = sharding.constrain(
            h_BLF, ("activation_batch", "activation_length", "activation_mlp")
        )
        return self.down_proj(h_BLF)


class GeluMLP(nnx.Module):
    """down(gelu(up(x))) with the tanh approximation of gelu: GPT-2's and MaxText's GPT-3 MLP
    (`jax.nn.gelu`'s default, transformers' gelu_new), biased with `model.mlp_bias`."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        d, f = spec.hidden_size, spec.intermediate_size
        common = _projection_args(spec, rngs, use_bias=spec.mlp_bias)
        self.up_proj = Dense((d,), (f,), ("embed",), ("mlp",), **common)
        self.down_proj = Dense((f,), (d,), ("mlp",), ("embed",), **common)

    def __call__(self, x_BLD: jax.Array) -> jax.Array:
        h_BLF = jax.nn.gelu(self.up_proj(x_BLD), approximate=True)
        h_BLF = sharding.constrain(
            h_BLF, ("activation_batch", "activation_length", "activation_mlp")
        )
        return self.down_proj(h_BLF)


def dense_mlp(spec: ModelSpec, *, rngs: nnx.Rngs) -> SwiGLU | GeluMLP:
    """A transformer block's dense MLP: ungated GELU, or gated by `model.mlp_activation`."""
    if spec.mlp_activation == "gelu":
        return GeluMLP(spec, rngs=rngs)
    return SwiGLU(spec, rngs=rngs, use_bias=spec.mlp_bias)
