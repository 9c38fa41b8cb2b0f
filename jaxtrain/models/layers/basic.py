"""Parameter-holding building blocks: dense projections, RMSNorm, the token embedding and
learned absolute positions.

Every parameter carries `logical_axes` metadata (one name per dimension); `jaxtrain.parallel.sharding`
turns those names into mesh shardings through the rule table, so model code never names a mesh axis.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.layers import fp8 as fp8_lib
from jaxtrain.models.layers.products import (
    accumulation_dtype,
    backward_operands,
    float32_operands,
    rounded,
)
from jaxtrain.models.layers.rounding import narrow
from jaxtrain.parallel import sharding


def softcap(x: jax.Array, cap: float) -> jax.Array:
    """cap x tanh(x / cap): x where |x| << cap, smoothly bounded by +-cap (Grok's logits)."""
    return cap * jnp.tanh(x / cap)


def make_param(
    rngs: nnx.Rngs, shape: Sequence[int], axes: Sequence[str], std: float, dtype: jnp.dtype
) -> nnx.Param:
    """A normal(0, std) parameter; std == 0 gives zeros (biases)."""
    if std == 0.0:
        value = jnp.zeros(tuple(shape), dtype)
    else:
        value = std * jax.random.normal(rngs.params(), tuple(shape), dtype)
    return nnx.Param(value, logical_axes=tuple(axes))


def _project(x: jax.Array, kernel: jax.Array, in_rank: int, out_dtype: Any) -> jax.Array:
    contract = tuple(range(x.ndim - in_rank, x.ndim))
    if out_dtype is not None and jnp.dtype(out_dtype) == jnp.float32:
        x, kernel = float32_operands(x, kernel)
    result_dtype = out_dtype or jnp.result_type(x, kernel)
    y = jax.lax.dot_general(
        x,
        kernel,
        ((contract, tuple(range(in_rank))), ((), ())),
        preferred_element_type=accumulation_dtype(result_dtype),
    )
    return rounded(y, result_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def project(x: jax.Array, kernel: jax.Array, in_rank: int, out_dtype: Any = None) -> jax.Array:
    """`x[..., in...] @ kernel[in..., out...]`, contracting x's last `in_rank` dimensions; the
    result in `out_dtype` (x's dtype when None; float32 keeps bfloat16 logits from rounding).

    The gradient is written out rather than derived because the operand order matters on
    backends that canonicalise matmuls by transposing an operand: autodiff computes the kernel
    gradient as `dy^T x` and so transposes the large activation gradient dy; `x^T dy` here
    transposes x, which is the smaller tensor whenever out > in (MLP up/gate projections, the
    output projection over the vocabulary), and is shared by projections of the same input.
    """
    return _project(x, kernel, in_rank, out_dtype)


def _project_fwd(x, kernel, in_rank, out_dtype):
    return _project(x, kernel, in_rank, out_dtype), (x, kernel)


def _project_bwd(in_rank, out_dtype, residuals, dy):
    x, kernel = residuals
    if out_dtype is not None and jnp.dtype(out_dtype) == jnp.float32:
        x_op, kernel_op, dy = backward_operands(x, kernel, dy)
    else:
        x_op, kernel_op, dy = x, kernel, narrow(dy, x.dtype)
    out_rank = kernel.ndim - in_rank
    batch = tuple(range(x.ndim - in_rank))
    dy_out = tuple(range(dy.ndim - out_rank, dy.ndim))
    k_out = tuple(range(in_rank, kernel.ndim))
    dx = jax.lax.dot_general(
        dy,
        kernel_op,
        ((dy_out, k_out), ((), ())),
        preferred_element_type=accumulation_dtype(jnp.result_type(dy, kernel_op)),
    )
    dkernel = jax.lax.dot_general(
        x_op,
        dy,
        ((batch, batch), ((), ())),
        preferred_element_type=accumulation_dtype(jnp.result_type(x_op, dy)),
    )
    return narrow(dx, x.dtype), narrow(dkernel, kernel.dtype)


project.defvjp(_project_fwd, _project_bwd)


class Dense(nnx.Module):
    """A projection `x[..., in] @ kernel[in..., out...]` whose kernel keeps its head structure.

    `in_axes` / `out_axes` are the logical names of the contracted and produced dimensions,
    e.g. a query projection is `embed -> (heads, head_dim)`, an output projection
    `(heads, head_dim) -> embed`. With an `fp8` recipe the product runs in float8
    (`jaxtrain.models.layers.fp8`), keeping its amax history in `fp8_amax` when the recipe needs one.
    """

    def __init__(
        self,
        in_shape: Sequence[int],
        out_shape: Sequence[int],
        in_axes: Sequence[str],
        out_axes: Sequence[str],
        *,
        rngs: nnx.Rngs,
        std: float,
        use_bias: bool = False,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        out_dtype=None,
        fp8: fp8_lib.Fp8Recipe | None = None,
    ):
        self.in_rank = len(in_shape)
        self.dtype = dtype
        self.out_dtype = out_dtype
        self.fp8 = fp8
        self.kernel = make_param(
            rngs, (*in_shape, *out_shape), (*in_axes, *out_axes), std, param_dtype
        )
        self.bias = make_param(rngs, out_shape, out_axes, 0.0, param_dtype) if use_bias else None
        if fp8 is not None and fp8.keeps_history:
            self.fp8_amax = fp8_lib.empty_history(fp8)

    def compute_kernel(self) -> jnp.ndarray:
        """The kernel in the compute dtype, as `__call__` multiplies by it."""
        return self.kernel[...].astype(self.dtype)

    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        if self.fp8 is not None:
            y = fp8_lib.project(
                x.astype(self.dtype),
                self.compute_kernel(),
                self.in_rank,
                self.fp8,
                fp8_lib.history_of(self),
                self.out_dtype,
            )
        else:
            y = project(x.astype(self.dtype), self.compute_kernel(), self.in_rank, self.out_dtype)
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        return y


class RMSNorm(nnx.Module):
    """Root-mean-square norm computed in float32, scaled by a learned weight (init 1), or with
    `zero_centered` by 1 + the weight (init 0), as Gemma stores it: the checkpoint's weights
    then map one to one, and weight decay pulls the scale towards 1, not 0.

    A tuple `size` (with one axis name per entry) normalizes over that many trailing
    dimensions at once, one weight per element: OLMo's qk-norm over all heads of q."""

    def __init__(
        self,
        size: int | tuple[int, ...],
        eps: float,
        *,
        axis_name: str | tuple[str, ...] = "norm",
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        zero_centered: bool = False,
    ):
        self.eps = eps
        self.dtype = dtype
        self.zero_centered = zero_centered
        shape = size if isinstance(size, tuple) else (size,)
        axes = axis_name if isinstance(axis_name, tuple) else (axis_name,)
        self.reduce = tuple(range(-len(shape), 0))
        init = jnp.zeros if zero_centered else jnp.ones
        self.scale = nnx.Param(init(shape, param_dtype), logical_axes=axes)

    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x32 = x.astype(jnp.float32)
        mean_square = jnp.mean(x32 * x32, axis=self.reduce, keepdims=True)
        normed = x32 * jax.lax.rsqrt(mean_square + self.eps)
        scale = self.scale[...].astype(jnp.float32)
        if self.zero_centered:
            scale = scale + 1.0
        return (normed * scale).astype(self.dtype)


class Embed(nnx.Module):
    """Token embedding table [vocab, embed]; `attend` reuses it as a tied output projection
    (in float8 with an `fp8` recipe: `model.fp8_output_layer`)."""

    def __init__(
        self,
        vocab_size: int,
        size: int,
        *,
        rngs: nnx.Rngs,
        std: float,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        fp8: fp8_lib.Fp8Recipe | None = None,
    ):
        self.dtype = dtype
        self.fp8 = fp8
        self.embedding = make_param(rngs, (vocab_size, size), ("vocab", "embed"), std, param_dtype)
        if fp8 is not None and fp8.keeps_history:
            self.fp8_amax = fp8_lib.empty_history(fp8)

    def __call__(self, tokens_BL: jnp.ndarray) -> jnp.ndarray:
        x_BLD = jnp.take(self.embedding[...], tokens_BL, axis=0).astype(self.dtype)
        return sharding.constrain(
            x_BLD, ("activation_batch", "activation_length", "activation_embed")
        )

    def attend_kernel(self) -> jnp.ndarray:
        """The tied output projection [embed, vocab] in the compute dtype."""
        return self.embedding[...].astype(self.dtype).T

    def attend(self, x_BLD: jnp.ndarray) -> jnp.ndarray:
        """Tied output projection: float32 logits [B, L, V] (see `project`)."""
        if self.fp8 is not None:
            return fp8_lib.project(
                x_BLD.astype(self.dtype),
                self.attend_kernel(),
                1,
                self.fp8,
                fp8_lib.history_of(self),
                jnp.float32,
            )
        return project(x_BLD.astype(self.dtype), self.attend_kernel(), 1, jnp.float32)


class LearnedPositions(nnx.Module):
    """A learned vector per absolute position, [positions, embed], added to the token
    embeddings in place of rotary embeddings (GPT-2 / GPT-3). Its rows stay whole on every
    device (a position table is small next to the vocabulary)."""

    def __init__(
        self,
        count: int,
        size: int,
        *,
        rngs: nnx.Rngs,
        std: float,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
    ):
        self.dtype = dtype
        self.embedding = make_param(rngs, (count, size), (None, "embed"), std, param_dtype)

    def __call__(self, positions_BL: jnp.ndarray) -> jnp.ndarray:
        x_BLD = jnp.take(self.embedding[...], positions_BL, axis=0).astype(self.dtype)
        return sharding.constrain(
            x_BLD, ("activation_batch", "activation_length", "activation_embed")
        )
