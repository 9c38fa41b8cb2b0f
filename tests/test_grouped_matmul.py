"""The experts' grouped matmul run as tiles (CPUs) against `jax.lax.ragged_dot`, values and
gradients, with empty groups, groups larger than a tile and rows past the last group."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrain.hardware import backend
from jaxtrain.models.layers import grouped_matmul


@pytest.mark.parametrize(
    "sizes", [[5, 0, 9, 2], [0, 0, 16, 0], [1, 1, 1, 1], [3, 17, 0, 4], [0, 0, 0, 0]]
)
def test_tiles_equal_ragged_dot_with_gradients(sizes):
    rows, d, f = 32, 8, 12  # rows past sum(sizes) give zeros in both
    x = jax.random.normal(jax.random.key(0), (rows, d))
    w = jax.random.normal(jax.random.key(1), (len(sizes), d, f))
    sizes = jnp.asarray(sizes, jnp.int32)

    def loss(run):
        return lambda x, w: jnp.sum(jnp.sin(run(x, w, sizes)))

    def tiles(x, w, s):
        return grouped_matmul.tiled(x, w, s, tile=4)

    np.testing.assert_allclose(
        tiles(x, w, sizes), jax.lax.ragged_dot(x, w, sizes), rtol=1e-6, atol=1e-6
    )
    expected = jax.grad(loss(jax.lax.ragged_dot), argnums=(0, 1))(x, w)
    got = jax.jit(jax.grad(loss(tiles), argnums=(0, 1)))(x, w)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_cpus_run_tiles_and_accelerators_their_grouped_gemm():
    assert backend.for_cpu(frozenset({"avx2"})).grouped_matmul == "tiles"
    assert backend.for_gpu("nvidia", "NVIDIA H100").grouped_matmul == "ragged"
    assert backend.for_gpu("amd", "AMD Instinct MI300X").grouped_matmul == "ragged"


def test_a_choice_that_does_not_exist_is_named():
    with pytest.raises(backend.ConfigError, match=r"backend.grouped_matmul='dense' is not one of"):
        backend.from_config({"grouped_matmul": "dense"})
    assert backend.from_config({"grouped_matmul": "ragged"}).grouped_matmul == "ragged"
