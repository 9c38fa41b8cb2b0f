"""bfloat16 products with float32 results: widened operands on CPUs without bfloat16 dots."""

import re

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrain.models import products
from jaxtrain.models.layers import project


def test_operands_widen_only_without_bf16_dot_instructions(monkeypatch):
    x = jnp.ones((4, 8), jnp.bfloat16)
    y = jnp.ones((8, 2), jnp.float32)
    monkeypatch.setattr(products, "_cpu_has_bf16_dot", lambda: False)
    assert [a.dtype for a in products.float32_operands(x, y)] == [jnp.float32, jnp.float32]
    monkeypatch.setattr(products, "_cpu_has_bf16_dot", lambda: True)
    assert [a.dtype for a in products.float32_operands(x, y)] == [jnp.bfloat16, jnp.float32]


def test_bf16_projection_to_float32_is_exact_and_runs_as_float32(monkeypatch):
    monkeypatch.setattr(products, "_cpu_has_bf16_dot", lambda: False)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(16, 64)), jnp.bfloat16)
    w = jnp.asarray(rng.normal(size=(64, 32)), jnp.bfloat16)
    fn = jax.jit(lambda a, b: project(a, b, 1, jnp.float32))
    out = fn(x, w)
    assert out.dtype == jnp.float32
    # The bfloat16 values, multiplied and summed exactly, up to float32 rounding.
    exact = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    np.testing.assert_allclose(np.asarray(out), exact, rtol=1e-5, atol=1e-5)
    assert _dot_operand_types(fn, x, w) == {"f32"}
    # Where the CPU has bfloat16 dots, XNNPACK's bfloat16 kernel reads them as they are.
    monkeypatch.setattr(products, "_cpu_has_bf16_dot", lambda: True)
    fn = jax.jit(lambda a, b: project(a, b, 1, jnp.float32))
    assert _dot_operand_types(fn, x, w) == {"bf16"}


def _dot_operand_types(fn, *args) -> set[str]:
    """Element types of the operands of the compiled program's dots (the parameters of the
    computation each dot sits in: XLA:CPU wraps every dot in a fusion of its own)."""
    hlo = fn.lower(*args).compile().as_text()
    types = set()
    for computation in hlo.split("\n\n"):
        if " dot(" in computation:
            header = computation.strip().splitlines()[0]
            types |= set(re.findall(r": (\w+)\[", header))
    return types
