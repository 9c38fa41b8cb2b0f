"""The capacity path's batched expert products: bfloat16 results rounded once, operands that
reach the bfloat16 kernel where the CPU has one, and the remat policies' view of them."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from training_helpers import (
    assert_remat_changes_no_value,
    dot_operand_types,
    on_backend,
    saved_residuals,
)

from jaxtrain.models.layers import products
from jaxtrain.models.presets.registry import model_spec


def _operands(seed: int = 0):
    rng = np.random.default_rng(seed)
    lhs = jnp.asarray(rng.normal(size=(3, 10, 32)), jnp.bfloat16)
    w = jnp.asarray(rng.normal(size=(3, 32, 24)), jnp.bfloat16)
    cotangent = jnp.asarray(rng.normal(size=(3, 10, 24)), jnp.bfloat16)
    return lhs, w, cotangent


def _loss(lhs, w, cotangent):
    y = products.batched_product(lhs, w)
    return jnp.sum(y.astype(jnp.float32) * cotangent.astype(jnp.float32)), y


@pytest.mark.parametrize("native", [True, False])
def test_bf16_batched_products_round_each_result_once(monkeypatch, native):
    """Output, input gradient and weight gradient are the exact values rounded once to
    bfloat16, on CPUs with bfloat16 dots and without."""
    on_backend(monkeypatch, bf16_products=native)
    lhs, w, c = _operands()
    (_, y), (dlhs, dw) = jax.jit(
        jax.value_and_grad(lambda a, b: _loss(a, b, c), argnums=(0, 1), has_aux=True)
    )(lhs, w)
    a, b, g = (np.asarray(t, np.float64) for t in (lhs, w, c))
    exact = (
        np.einsum("ecx,exy->ecy", a, b),
        np.einsum("ecy,exy->ecx", g, b),
        np.einsum("ecx,ecy->exy", a, g),
    )
    for got, value in zip((y, dlhs, dw), exact):
        assert got.dtype == jnp.bfloat16
        once = np.asarray(jnp.asarray(value, jnp.float32).astype(jnp.bfloat16), np.float32)
        # Float32 sums round to bfloat16 as the exact ones do but for a rare tie.
        assert np.mean(np.asarray(got, np.float32) == once) > 0.99


def test_bf16_batched_products_multiply_on_the_bf16_kernel_where_the_cpu_has_one(monkeypatch):
    """Every product, forward and backward, reads bfloat16 operands where the CPU multiplies
    bfloat16 (autodiff's products of an einsum asked for bfloat16 results, which XLA:CPU
    multiplies in float32), and float32 ones where its bfloat16 kernel is the slower one."""
    lhs, w, c = _operands()
    for native, operand_types in ((True, {"bf16"}), (False, {"f32"})):
        on_backend(monkeypatch, bf16_products=native)
        # Traced anew for each backend; the cotangent an argument, not a constant that XLA
        # could fold into a float32 one.
        grad = jax.jit(jax.grad(lambda a, b, c: _loss(a, b, c)[0], argnums=(0, 1)))
        assert dot_operand_types(grad, lhs, w, c) == operand_types


@pytest.mark.parametrize("remat, saved_gate_and_up", [("dots", 2), ("minimal", 0)])
def test_only_the_policy_that_saves_batched_products_saves_them(remat, saved_gate_and_up):
    """Behind a custom gradient the products are out of the policies' sight: `remat=dots`
    still saves the gate and up results [E, C, F] per layer, `minimal` (unbatched products
    only) none, as for a plain einsum; saving changes no value."""
    spec = model_spec("mixtral-debug", remat=remat, moe_capacity_factor=1.5)
    assignments = 2 * 16 * spec.num_experts_per_tok  # saved_residuals' [2, 16] tokens
    capacity = math.ceil(spec.moe_capacity_factor * assignments / spec.num_experts)
    buffer = (spec.num_layers, spec.num_experts, capacity, spec.moe_intermediate_size)
    saved = [aval.shape for aval in saved_residuals(spec)]
    assert saved.count(buffer) == saved_gate_and_up
    assert_remat_changes_no_value(spec)
