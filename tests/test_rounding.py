"""float32 -> bfloat16 by integer operations on CPUs (`models/layers/rounding.py`): bit for bit
XLA's own rounding, the derivative of a cast, and a bfloat16 train step that does not change."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from training_helpers import compiled_step_text, mesh, on_backend, train

from jaxtrain.models.layers.rounding import narrow
from jaxtrain.models.presets.registry import model_spec


def _every_rounding_case() -> np.ndarray:
    """float32 bit patterns: every upper half (each sign, exponent and kept mantissa, NaNs and
    infinities included) with the lower halves that decide rounding (exact, just below, at
    and just above the tie, the largest), then a million random patterns."""
    upper = np.arange(1 << 16, dtype=np.uint32) << 16
    lower = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    structured = (upper[:, None] | lower[None, :]).ravel()
    random = np.random.default_rng(0).integers(0, 1 << 32, size=1 << 20, dtype=np.uint32)
    return np.concatenate([structured, random]).view(np.float32)


def _bits(x) -> np.ndarray:
    return np.asarray(x).view(np.uint16)


def test_rounding_by_bits_is_the_cast_bit_for_bit(monkeypatch):
    on_backend(monkeypatch, rounds_by_bits=True)
    x = jnp.asarray(_every_rounding_case())
    by_bits = jax.jit(lambda v: narrow(v, jnp.bfloat16))
    # The integer form is what runs: no conversion to bfloat16 left in the program.
    assert "bitcast_convert_type" in str(jax.make_jaxpr(by_bits)(x))
    cast = jax.jit(lambda v: v.astype(jnp.bfloat16))(x)
    np.testing.assert_array_equal(_bits(by_bits(x)), _bits(cast))
    # ml_dtypes (NumPy's bfloat16) rounds to nearest even too; NaNs aside, the same bits.
    finite = ~np.isnan(np.asarray(x))
    reference = np.asarray(x)[finite].astype(jnp.bfloat16)
    np.testing.assert_array_equal(_bits(by_bits(x))[finite], reference.view(np.uint16))


def test_without_the_choice_and_for_other_types_it_is_the_cast(monkeypatch):
    x = jnp.linspace(-3.0, 3.0, 7, dtype=jnp.float32)
    on_backend(monkeypatch, rounds_by_bits=False)
    assert "bitcast_convert_type" not in str(jax.make_jaxpr(lambda v: narrow(v, jnp.bfloat16))(x))
    on_backend(monkeypatch, rounds_by_bits=True)
    for source, target in ((jnp.float32, jnp.float16), (jnp.bfloat16, jnp.float32)):
        out = narrow(x.astype(source), target)
        assert out.dtype == target
        np.testing.assert_array_equal(np.asarray(out), np.asarray(x.astype(source).astype(target)))


def test_its_derivative_is_the_casts(monkeypatch):
    on_backend(monkeypatch, rounds_by_bits=True)
    x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 8)), jnp.float32)
    w = jnp.asarray(np.random.default_rng(2).normal(size=(4, 8)), jnp.bfloat16)

    def loss(cast):
        return lambda v: jnp.sum((cast(v) * w).astype(jnp.float32) ** 2)

    by_bits = jax.grad(loss(lambda v: narrow(v, jnp.bfloat16)))(x)
    cast = jax.grad(loss(lambda v: v.astype(jnp.bfloat16)))(x)
    assert by_bits.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(by_bits), np.asarray(cast))
    tangent = jax.jvp(lambda v: narrow(v, jnp.bfloat16), (x,), (jnp.ones_like(x),))[1]
    assert tangent.dtype == jnp.bfloat16 and bool(jnp.all(tangent == 1))


@pytest.mark.parametrize("preset", ["llama-debug", "mixtral-debug"])
def test_a_bfloat16_train_step_is_the_same_either_way(monkeypatch, preset):
    """Projections, attention and the experts' tiles round where the backend says: two steps
    give the same losses and parameters, bit for bit, rounding by bits or by casts."""
    spec = model_spec(preset, dtype="bfloat16")
    results = {}
    for by_bits in (False, True):
        on_backend(monkeypatch, rounds_by_bits=by_bits)
        jax.clear_caches()
        losses, _, state, _, _ = train(spec, mesh(), steps=2)
        bitcasts = compiled_step_text(spec, mesh(), "fsdp_tensor").count(" bitcast-convert(")
        results[by_bits] = losses, state["params"], bitcasts
    # The step does round by bits where asked: float32 to integers and integers to bfloat16.
    assert results[True][2] > results[False][2]
    assert results[True][0] == results[False][0]
    jax.tree.map(np.testing.assert_array_equal, results[True][1], results[False][1])
