"""How bfloat16 products reach the hardware's kernels: operands and result types per backend.

A bfloat16 x bfloat16 product that accumulates in float32 gives the same result whether its
kernel reads bfloat16 or the same values widened to float32: widening is exact. Which kernel is
faster depends on the machine (docs/performance.md#hardware-choices), and
`jaxtrain.hardware.backend` makes the choice:

- XLA:CPU runs a product whose *result* is bfloat16 as a float32 product behind conversions,
  whatever the CPU. One with a float32 result (`preferred_element_type=float32`) goes to
  XNNPACK's bfloat16 kernel instead.
- On CPUs with bfloat16 dot instructions (AVX512-BF16, AMX) that kernel is the fast one, so
  `accumulation_dtype` asks every bfloat16 product for a float32 result, which the caller rounds
  to bfloat16: the same rounding as before, from the bfloat16 kernel.
- On x86 CPUs without them (AVX2 only) XNNPACK's bfloat16 kernel is slower than the float32
  one, so `float32_operands` widens the operands of float32-result products (attention scores,
  logits) first.
- GPUs and TPUs multiply bfloat16 with float32 accumulation whatever result type is asked for,
  and keep both as they are.

A rounded product's float32 result is an accumulator, like a float8 product's:
`remat_policy` keeps the policies that save matmul results from saving it, twice the bytes of
the rounded result they save instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from jaxtrain.hardware import backend
from jaxtrain.models.layers.rounding import narrow
from jaxtrain.parallel import varying

_NARROW = (jnp.bfloat16, jnp.float16)
# The name under which a rounded product's result is offered to the remat policies.
ROUNDED_NAME = "rounded_product"
# The name of `batched_product`'s result, which only the policies that save batched products
# (`remat=dots`) save.
BATCHED_NAME = "batched_product"


def widens_products() -> bool:
    """Whether the backend widens bfloat16 products to float32 (CPUs without bfloat16 dots)."""
    return not backend.current().bf16_products


def accumulation_dtype(result_dtype: Any) -> Any:
    """The result type to ask a product for when it is to end as `result_dtype`: float32 for a
    bfloat16 result on backends that round narrow products (`Backend.rounds_narrow_products`),
    else `result_dtype` itself (float16 too: only bfloat16's kernels were measured). The caller
    casts the product to `result_dtype`, a no-op where they are the same."""
    if jnp.dtype(result_dtype) == jnp.bfloat16 and backend.current().rounds_narrow_products:
        return jnp.float32
    return result_dtype


def rounded(product: jax.Array, result_dtype: Any) -> jax.Array:
    """A product asked for in `accumulation_dtype(result_dtype)`, as `result_dtype`; where that
    rounds it, the result is named `ROUNDED_NAME` for `remat_policy`."""
    if product.dtype == jnp.dtype(result_dtype):
        return product
    return checkpoint_name(narrow(product, result_dtype), ROUNDED_NAME)


def batched_product(lhs_ECX: jax.Array, w_EXY: jax.Array) -> jax.Array:
    """lhs_ECX @ w_EXY for each e (the capacity path's experts), in lhs's dtype: where the
    backend rounds narrow products, every product of both passes takes a float32 result and
    rounds it once, as `layers.project` does, so bfloat16 operands reach the bfloat16 kernel
    (a plain einsum and autodiff's products of it ran in float32 behind conversions of whole
    [E, C, F] buffers); where the CPU's bfloat16 kernel is the slower one, float32 operands,
    as the experts' tiles take; elsewhere (GPUs) the einsum's products. The result is named
    `BATCHED_NAME` outside the custom gradient, where the remat policies see it (they see no
    product inside), so `remat=dots` can save it."""
    lhs_ECX, w_EXY = varying.alike(lhs_ECX, w_EXY)  # under shard_map (see `varying`)
    return checkpoint_name(_batched_product(lhs_ECX, w_EXY), BATCHED_NAME)


@jax.custom_vjp
def _batched_product(lhs_ECX: jax.Array, w_EXY: jax.Array) -> jax.Array:
    return _batched(lhs_ECX, w_EXY, "ecx,exy->ecy", lhs_ECX.dtype)


def _batched(a: jax.Array, b: jax.Array, spec: str, result_dtype: Any) -> jax.Array:
    if widens_products():  # the CPU's bfloat16 kernel is the slower one: float32 throughout
        a, b = float32_operands(a, b)
        accumulate = jnp.float32
    else:
        accumulate = accumulation_dtype(result_dtype)
    return narrow(jnp.einsum(spec, a, b, preferred_element_type=accumulate), result_dtype)


def _batched_fwd(lhs_ECX, w_EXY):
    return _batched_product(lhs_ECX, w_EXY), (lhs_ECX, w_EXY)


def _batched_bwd(residuals, dy_ECY):
    lhs_ECX, w_EXY = residuals
    dlhs_ECX = _batched(dy_ECY, w_EXY, "ecy,exy->ecx", lhs_ECX.dtype)
    # lhs transposed first, into a [E x X, C] matrix behind a barrier: XLA:CPU's bfloat16
    # kernel takes an lhs that contracts over its last dimension in memory, and it widened
    # this product to float32 when XLA could fold the transpose back into it (a swap alone,
    # with or without the barrier, or a loop over the experts).
    e, c, x = lhs_ECX.shape
    lhs_2d = jax.lax.optimization_barrier(jnp.swapaxes(lhs_ECX, 1, 2).reshape(e * x, c))
    lhs_EXC = lhs_2d.reshape(e, x, c)
    dw_EXY = _batched(lhs_EXC, dy_ECY, "exc,ecy->exy", w_EXY.dtype)
    return dlhs_ECX, dw_EXY


_batched_product.defvjp(_batched_fwd, _batched_bwd)


def remat_policy(policy: Callable[..., bool], names: tuple[str, ...]) -> Callable[..., bool]:
    """`policy`, a remat policy that saves matmul results, made to save the results of products
    that are cast after (float8 products; bfloat16 products on backends that round them) as
    cast, under `names`, instead of their float32 accumulators, twice the bytes.

    The accumulators are told apart by their operands: float8 ones, or bfloat16 ones with a
    float32 result and no batch dimensions (a projection's) where the backend rounds."""
    keep_names = jax.checkpoint_policies.save_only_these_names(*names)

    def saves(prim, *avals, **params) -> bool:
        if prim is jax.lax.dot_general_p and _is_accumulator(avals, params):
            return False
        return bool(policy(prim, *avals, **params) or keep_names(prim, *avals, **params))

    return saves


def _is_accumulator(avals, params) -> bool:
    if any(_is_float8(a.dtype) for a in avals):
        return True
    (_, _), (lhs_batch, _) = params["dimension_numbers"]
    return (
        not lhs_batch
        and all(a.dtype == jnp.bfloat16 for a in avals)
        and params.get("preferred_element_type") == jnp.float32
        and backend.current().rounds_narrow_products
    )


def _is_float8(dtype: Any) -> bool:
    return jnp.issubdtype(dtype, jnp.floating) and jnp.dtype(dtype).itemsize == 1


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
        d_out = narrow(d_out, x.dtype)
    return x_op, kernel_op, d_out
