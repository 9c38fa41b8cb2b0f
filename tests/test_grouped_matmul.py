"""The experts' grouped matmul run as tiles (CPUs) against `jax.lax.ragged_dot`, values and
gradients, with empty groups, groups larger than a tile and rows past the last group; bfloat16
tiles rounded once on the kernel the CPU has; the remat policies saving the tiles' result."""

from __future__ import annotations

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

from jaxtrain.hardware import backend
from jaxtrain.models.layers import grouped_matmul
from jaxtrain.models.presets.registry import model_spec


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


def _exact(x, w, sizes, cotangent):
    """y, dx, dw of sum(y * cotangent), y = rows times their group's weights, in float64."""
    x, w, c = (np.asarray(a, np.float64) for a in (x, w, cotangent))
    y, dx, dw = np.zeros((x.shape[0], w.shape[2])), np.zeros_like(x), np.zeros_like(w)
    start = 0
    for g, size in enumerate(np.asarray(sizes)):
        rows = slice(start, start + size)
        y[rows] = x[rows] @ w[g]
        dx[rows] = c[rows] @ w[g].T
        dw[g] = x[rows].T @ c[rows]
        start += size
    return y, dx, dw


@pytest.mark.parametrize("native", [True, False])
def test_bf16_tiles_round_each_result_once(monkeypatch, native):
    """bfloat16 tiles give every output, input gradient and kernel gradient as the exact value
    rounded once to bfloat16, a group's kernel gradient summed over all its tiles first, on
    CPUs with bfloat16 dots and without."""
    on_backend(monkeypatch, bf16_products=native)
    rng = np.random.default_rng(0)
    sizes = jnp.asarray([9, 0, 17, 6], jnp.int32)  # groups of several 4-row tiles
    x = jnp.asarray(rng.normal(size=(36, 32)), jnp.bfloat16)  # 4 rows past the groups
    w = jnp.asarray(rng.normal(size=(4, 32, 24)), jnp.bfloat16)
    c = jnp.asarray(rng.normal(size=(36, 24)), jnp.bfloat16)

    def loss(x, w):
        y = grouped_matmul.tiled(x, w, sizes, tile=4)
        return jnp.sum(y.astype(jnp.float32) * c.astype(jnp.float32)), y

    (_, y), (dx, dw) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(x, w)
    for got, exact in zip((y, dx, dw), _exact(x, w, sizes, c)):
        assert got.dtype == jnp.bfloat16
        once = np.asarray(jnp.asarray(exact, jnp.float32).astype(jnp.bfloat16), np.float32)
        # Float32 sums round to bfloat16 as the exact ones do but for a rare tie.
        assert np.mean(np.asarray(got, np.float32) == once) > 0.99
    assert not np.any(np.asarray(y[32:], np.float32)) and not np.any(
        np.asarray(dx[32:], np.float32)
    )


def test_bf16_tiles_multiply_on_the_bf16_kernel_where_the_cpu_has_one(monkeypatch):
    """Every product of the tiles, forward and backward, reads bfloat16 operands where the CPU
    multiplies bfloat16, and float32 ones where its bfloat16 kernel is the slower one."""
    x = jnp.ones((64, 32), jnp.bfloat16)
    w = jnp.ones((4, 32, 24), jnp.bfloat16)
    sizes = jnp.asarray([20, 4, 30, 10], jnp.int32)

    def loss(x, w):
        return jnp.sum(grouped_matmul.tiled(x, w, sizes, tile=8).astype(jnp.float32))

    for native, operand_types in ((True, {"bf16"}), (False, {"f32"})):
        on_backend(monkeypatch, bf16_products=native)
        assert dot_operand_types(jax.jit(jax.grad(loss, argnums=(0, 1))), x, w) == operand_types


def _mixtral_on_tiles(monkeypatch, remat: str):
    """mixtral-debug with 4-row tiles, so that its small layers take the tiles."""
    monkeypatch.setattr(grouped_matmul, "TILE_ROWS", 4)
    on_backend(monkeypatch, grouped_matmul="tiles")
    return model_spec("mixtral-debug", remat=remat)


@pytest.mark.parametrize("remat", ["minimal", "dots"])
def test_remat_policies_that_save_products_save_the_tiles_result(monkeypatch, remat):
    """The tiles' products run behind a custom gradient, out of the policies' sight; the
    policies that save matmul results still save the tiles' result [rows, F], and saving it
    changes no value."""
    spec = _mixtral_on_tiles(monkeypatch, remat)
    rows = 2 * 16 * spec.num_experts_per_tok  # saved_residuals' [2, 16] tokens, k experts each
    saved = [aval.shape for aval in saved_residuals(spec)]
    # Gate and up products, stacked over the scanned layers.
    assert saved.count((spec.num_layers, rows, spec.moe_intermediate_size)) == 2
    assert_remat_changes_no_value(spec)


def test_tiles_under_shard_map_sum_the_row_gradient_over_the_weights_split():
    """Under `shard_map`, rows split over one axis times weights split over another (`tensor`,
    over F): the tiles' gradients are ragged_dot's, the rows' summed over the weights' split."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2, 2), ("data", "tensor"), devices=jax.devices()[:4])
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(2, 24, 8)), jnp.float32)  # [shard, rows, D]
    w = jnp.asarray(rng.normal(size=(3, 8, 12)), jnp.float32)  # F split over tensor
    sizes = jnp.asarray([[10, 0, 12], [3, 17, 4]], jnp.int32)

    def sharded(matmul):
        def local(x, w, sizes):
            return jnp.sum(jnp.sin(matmul(x[0], w, sizes[0])))[None]

        def loss(x, w):
            per_shard = jax.shard_map(
                local,
                mesh=mesh,
                in_specs=(P("data"), P(None, None, "tensor"), P("data")),
                out_specs=P(("data", "tensor")),
            )(x, w, sizes)
            return jnp.sum(per_shard)

        return jax.jit(jax.grad(loss, argnums=(0, 1)))

    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    w = jax.device_put(w, NamedSharding(mesh, P(None, None, "tensor")))
    sizes = jax.device_put(sizes, NamedSharding(mesh, P("data")))
    expected = sharded(jax.lax.ragged_dot)(x, w)
    got = sharded(lambda x, w, s: grouped_matmul.tiled(x, w, s, tile=4))(x, w)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
