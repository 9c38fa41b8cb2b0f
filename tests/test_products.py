"""bfloat16 products: widened operands on CPUs without bfloat16 dots, float32 results rounded
on CPUs with them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from training_helpers import (
    assert_remat_changes_no_value,
    dot_operand_types,
    on_backend,
    saved_activations,
)

from jaxtrain.models.layers import products
from jaxtrain.models.layers.basic import project
from jaxtrain.models.presets.registry import model_spec


def bf16_products(monkeypatch, native: bool) -> None:
    """Traces as on a machine whose bfloat16 products are native (or widened to float32)."""
    on_backend(monkeypatch, bf16_products=native)


def test_operands_widen_only_without_bf16_dot_instructions(monkeypatch):
    x = jnp.ones((4, 8), jnp.bfloat16)
    y = jnp.ones((8, 2), jnp.float32)
    bf16_products(monkeypatch, False)
    assert [a.dtype for a in products.float32_operands(x, y)] == [jnp.float32, jnp.float32]
    bf16_products(monkeypatch, True)
    assert [a.dtype for a in products.float32_operands(x, y)] == [jnp.bfloat16, jnp.float32]


def test_bf16_projection_to_float32_is_exact_and_runs_as_float32(monkeypatch):
    bf16_products(monkeypatch, False)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(16, 64)), jnp.bfloat16)
    w = jnp.asarray(rng.normal(size=(64, 32)), jnp.bfloat16)
    fn = jax.jit(lambda a, b: project(a, b, 1, jnp.float32))
    out = fn(x, w)
    assert out.dtype == jnp.float32
    # The bfloat16 values, multiplied and summed exactly, up to float32 rounding.
    exact = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    np.testing.assert_allclose(np.asarray(out), exact, rtol=1e-5, atol=1e-5)
    assert dot_operand_types(fn, x, w) == {"f32"}
    # Where the CPU has bfloat16 dots, XNNPACK's bfloat16 kernel reads them as they are.
    bf16_products(monkeypatch, True)
    fn = jax.jit(lambda a, b: project(a, b, 1, jnp.float32))
    assert dot_operand_types(fn, x, w) == {"bf16"}


def test_gradients_of_a_float32_projection_keep_the_float32_cotangent(monkeypatch):
    """The logits' gradient is float32. Where the products run on widened operands it enters
    the backward products unrounded, so each bfloat16 gradient is the exact product of the
    operands with it, rounded once; elsewhere it is rounded to bfloat16 first."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(16, 64)), jnp.bfloat16)
    w = jnp.asarray(rng.normal(size=(64, 32)), jnp.bfloat16)
    g = jnp.asarray(rng.normal(size=(16, 32)), jnp.float32)  # not representable in bfloat16

    def grads():
        jax.clear_caches()
        fn = jax.jit(
            jax.grad(lambda a, b: jnp.sum(project(a, b, 1, jnp.float32) * g), argnums=(0, 1))
        )
        return [np.asarray(d, np.float32) for d in fn(x, w)]

    def rounded_once(exact):
        return np.asarray(jnp.asarray(exact, jnp.float32).astype(jnp.bfloat16), np.float32)

    exact_dx = np.asarray(g, np.float64) @ np.asarray(w, np.float64).T
    exact_dw = np.asarray(x, np.float64).T @ np.asarray(g, np.float64)
    bf16_products(monkeypatch, False)
    dx, dw = grads()
    # float32 accumulation can only flip a rounding that was a near tie.
    assert np.mean(dx == rounded_once(exact_dx)) > 0.99
    assert np.mean(dw == rounded_once(exact_dw)) > 0.99
    bf16_products(monkeypatch, True)
    dx_native, dw_native = grads()
    # The cotangent rounded first: most results land one bfloat16 step away.
    assert np.mean(dw_native == rounded_once(exact_dw)) < 0.9
    np.testing.assert_allclose(dw_native, exact_dw, rtol=2e-2, atol=0.1)
    np.testing.assert_allclose(dx_native, exact_dx, rtol=2e-2, atol=0.1)


def test_bf16_projections_run_on_the_bf16_kernel_where_the_cpu_has_one(monkeypatch):
    """A projection with a bfloat16 result, forward and backward. XLA:CPU would widen such a
    product to float32; on CPUs with bfloat16 dots each one asks for a float32 result instead,
    so the bfloat16 kernel runs, and rounds it once: the values are those of the widened
    product. Activations are [batch, length, embed], as in the models."""
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.normal(size=(2, 8, 64)), jnp.bfloat16)
    w = jnp.asarray(rng.normal(size=(64, 32)), jnp.bfloat16)
    g = jnp.asarray(rng.normal(size=(2, 8, 32)), jnp.bfloat16)

    def loss(a, b, cotangent):
        return jnp.sum(project(a, b, 1).astype(jnp.float32) * cotangent.astype(jnp.float32))

    def forward(a, b):
        return project(a, b, 1)

    def rounded_once(exact):
        return np.asarray(jnp.asarray(exact, jnp.float32).astype(jnp.bfloat16), np.float32)

    f64 = [np.asarray(a, np.float64) for a in (x, w, g)]
    exact = [f64[0] @ f64[1], f64[2] @ f64[1].T, np.einsum("blx,bly->xy", f64[0], f64[2])]
    for native, operand_types in ((True, {"bf16"}), (False, {"f32"})):
        bf16_products(monkeypatch, native)
        jax.clear_caches()
        fns = [jax.jit(forward), jax.jit(jax.grad(loss, argnums=(0, 1)))]
        assert dot_operand_types(fns[0], x, w) == operand_types
        assert dot_operand_types(fns[1], x, w, g) == operand_types
        y = fns[0](x, w)
        dx, dw = fns[1](x, w, g)
        assert y.dtype == dx.dtype == dw.dtype == jnp.bfloat16
        for got, want in zip((y, dx, dw), exact, strict=True):
            # float32 accumulation can only flip a rounding that was a near tie.
            assert np.mean(np.asarray(got, np.float32) == rounded_once(want)) > 0.99


@pytest.mark.parametrize("remat", ["minimal", "dots", "dots_with_no_batch_dims"])
def test_remat_saves_rounded_products_as_rounded(monkeypatch, remat):
    """A policy that saves matmul results keeps a rounded product as bfloat16, as where XLA
    widens the product, not its float32 accumulator (twice the bytes); saving or recomputing
    changes no value."""
    spec = model_spec("llama-debug", dtype="bfloat16", remat=remat)
    bf16_products(monkeypatch, False)
    widened = saved_activations(spec)
    bf16_products(monkeypatch, True)
    assert saved_activations(spec) == widened
    assert set(widened) == {"bfloat16"}
    assert_remat_changes_no_value(spec)
