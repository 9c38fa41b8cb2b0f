"""Operands of float32-accumulating products, widened where the hardware has no bfloat16 dot.

A bfloat16 x bfloat16 product that accumulates in float32 gives the same result whether its
kernel reads bfloat16 or the same values widened to float32: widening is exact. Which kernel is
faster depends on the machine. XLA:CPU already widens products whose result is bfloat16; one
with a float32 result (`preferred_element_type=float32`: attention scores, logits) instead goes
to XNNPACK's bfloat16 kernel, which on x86 CPUs without bfloat16 dot instructions (AVX2 only, no
AVX512-BF16 or AMX) is slower than the float32 one (docs/performance.md#hardware-choices). There,
`float32_operands` widens them first; GPUs, TPUs and CPUs with bfloat16 dot
instructions keep bfloat16 operands. `jaxtrain.hardware.backend` makes the choice.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxtrain.hardware import backend

_NARROW = (jnp.bfloat16, jnp.float16)


def widens_products() -> bool:
    """Whether the backend widens bfloat16 products to float32 (CPUs without bfloat16 dots)."""
    return not backend.current().bf16_products


def float32_operands(*operands: jax.Array) -> tuple[jax.Array, ...]:
    """The operands of a product that accumulates in float32, bfloat16/float16 ones widened to
    float32 where `widens_products()`; unchanged elsewhere."""
    if not widens_products():
        return operands
    return tuple(x.astype(jnp.float32) if x.dtype in _NARROW else x for x in operands)


def backward_operands(
    x: jax.Array, kernel: jax.Array, d_out: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(x, kernel, d_out) for the backward products of `x @ kernel` taken with a float32 result
    (the logits), whose cotangent `d_out` is float32.

    Where `float32_operands` widens the operands the float32 cotangent enters as it is: rounding
    the [tokens, vocab] logits gradient to bfloat16 only for XLA to widen it again costs a
    conversion pass over the step's largest tensor, and each gradient is then rounded once
    instead of twice. Elsewhere the cotangent takes x's dtype, for the native bfloat16 products.
    """
    x_op, kernel_op = float32_operands(x, kernel)
    if x_op.dtype != jnp.float32:
        d_out = d_out.astype(x.dtype)
    return x_op, kernel_op, d_out
