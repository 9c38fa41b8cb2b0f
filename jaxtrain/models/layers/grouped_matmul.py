"""The experts' grouped matmul: rows [A, D] sorted by group, weights [G, D, F], group sizes [G];
row a is multiplied by the weights of its group, and rows past the groups give zeros.

Two ways to run it, chosen by the backend (`Backend.grouped_matmul`):

- "ragged": `jax.lax.ragged_dot`, the platform's grouped GEMM (GPUs, TPUs).
- "tiles": XLA's CPU compiler runs `ragged_dot` as G dense products over all rows, masked, so
  an expert layer costs G / k times the FLOPs it needs. Instead every group is padded to whole
  tiles of `TILE_ROWS` rows, and each tile is multiplied by its one group's weights: at most
  A + G x TILE_ROWS rows are multiplied, a static bound. Used where that is no more rows than
  `ragged_dot` multiplies.

The tiles run in two loops, over the groups and, inside, over the group's own tiles, with the
gradient written out: each group's weights are read once per pass rather than once per tile,
the kernel gradient of a group is summed over its tiles in a [D, F] accumulator and written
once (autodiff of a loop over tiles adds a full [G, D, F] gradient at every tile), and the
backward pass keeps only the rows, weights and sizes. Every product asks for a float32 result,
kept in float32 until the last tile and then rounded once: bfloat16 operands reach the
bfloat16 kernel of CPUs that have one (`products.float32_operands` widens them only where that
kernel is the slower one), and a group's kernel gradient is summed over its tiles in float32.
Figures and the CPUs they were measured on: docs/performance.md#hardware-choices.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from jaxtrain.hardware import backend
from jaxtrain.models.layers.products import float32_operands
from jaxtrain.models.layers.rounding import narrow
from jaxtrain.parallel import varying

TILE_ROWS = 128
# The name under which the tiles' result is offered to the remat policies: their products run
# behind a custom gradient, out of the policies' sight, so the policies that save matmul
# results save it under this name instead.
OUTPUT_NAME = "grouped_product"


def grouped_matmul(x_AD: jax.Array, w_GDF: jax.Array, sizes_G: jax.Array) -> jax.Array:
    """rows x_AD times the weights of their group (see the module docstring): y_AF."""
    rows, groups = x_AD.shape[0], w_GDF.shape[0]
    # Tiles where they multiply no more rows than ragged_dot: with as many rows they were
    # faster (0.73x its time), with more slower (1.2-1.4x; docs/performance.md).
    if backend.current().grouped_matmul == "tiles" and groups * rows >= tiled_rows(
        rows, groups, TILE_ROWS
    ):
        return tiled(x_AD, w_GDF, sizes_G, TILE_ROWS)
    return jax.lax.ragged_dot(x_AD, w_GDF, sizes_G)


def tiled_rows(rows: int, groups: int, tile: int = TILE_ROWS) -> int:
    """The rows `tiled` multiplies: every group padded to whole tiles, at most."""
    return (-(-rows // tile) + groups) * tile


def tiled(
    x_AD: jax.Array, w_GDF: jax.Array, sizes_G: jax.Array, tile: int = TILE_ROWS
) -> jax.Array:
    """The grouped matmul over tiles of `tile` rows, each in one group (module docstring)."""
    x_AD, w_GDF, sizes_G = varying.alike(x_AD, w_GDF, sizes_G)
    return checkpoint_name(_tiled(tile, x_AD, w_GDF, sizes_G), OUTPUT_NAME)


class _Layout(NamedTuple):
    """Where the rows go in the padded buffer of `tiles` x `tile` rows."""

    slot_A: jax.Array  # each row's place; rows past the groups point past the buffer
    first_tile_G: jax.Array  # each group's first tile
    end_tile_G: jax.Array  # one past each group's last tile
    tiles: int  # the static bound on tiles


def _layout(rows: int, sizes_G: jax.Array, tile: int) -> _Layout:
    groups = sizes_G.shape[0]
    end_G = jnp.cumsum(sizes_G)
    tiles_G = (sizes_G + tile - 1) // tile
    end_tile_G = jnp.cumsum(tiles_G)
    first_tile_G = end_tile_G - tiles_G
    row_A = jnp.arange(rows)
    group_A = jnp.searchsorted(end_G, row_A, side="right")  # `groups` past the last group
    known_A = jnp.minimum(group_A, groups - 1)
    slot_A = first_tile_G[known_A] * tile + row_A - (end_G - sizes_G)[known_A]
    tiles = tiled_rows(rows, groups, tile) // tile  # each group adds at most one part-filled tile
    slot_A = jnp.where(group_A < groups, slot_A, tiles * tile)
    return _Layout(slot_A, first_tile_G, end_tile_G, tiles)


def _padded(rows_AX: jax.Array, layout: _Layout, tile: int) -> jax.Array:
    """The rows in their tiles, [tiles x tile, X]; zeros between groups, rows past them dropped.

    Gathered slot by slot, and 16-bit floats as their bits: XLA:CPU scatters and gathers
    bfloat16 through float32 copies of the whole buffer."""
    rows = rows_AX.shape[0]
    row_P = jnp.full((layout.tiles * tile,), rows, jnp.int32)
    row_P = row_P.at[layout.slot_A].set(jnp.arange(rows, dtype=jnp.int32), mode="drop")
    if rows_AX.dtype.itemsize != 2:
        return jnp.take(rows_AX, row_P, axis=0, mode="fill", fill_value=0)
    bits_AX = jax.lax.bitcast_convert_type(rows_AX, jnp.uint16)
    bits_PX = jnp.take(bits_AX, row_P, axis=0, mode="fill", fill_value=0)  # 0: +0.0
    return jax.lax.bitcast_convert_type(bits_PX, rows_AX.dtype)


def _unpadded(padded_PX: jax.Array, layout: _Layout) -> jax.Array:
    """The rows back out of their tiles; zeros for rows past the groups."""
    return jnp.take(padded_PX, layout.slot_A, axis=0, mode="fill", fill_value=0)


def _product(a: jax.Array, b: jax.Array, contracting: tuple) -> jax.Array:
    """a . b contracting `contracting`, with a float32 result (or wider) for the caller to sum
    or round: bfloat16 operands stay bfloat16 where the hardware multiplies them
    (`products.float32_operands`)."""
    return jax.lax.dot_general(
        *float32_operands(a, b), (contracting, ((), ())), preferred_element_type=_wide(a, b)
    )


def _wide(*arrays: jax.Array):
    """The type the products' results are kept in until the end: float32, or wider."""
    return jnp.promote_types(jnp.result_type(*arrays), jnp.float32)


def _scope_of_group_loops(layout: _Layout, w_GDF: jax.Array):
    """The name scope of the loops over one group's tiles, whose trip count depends on the
    routing: it states their bound, at most `tiles` trips over the G groups, for the planner's
    count of the FLOPs the program executes (`planning.hlo_text`)."""
    return jax.named_scope(f"mean_trips_{layout.tiles}_per_{w_GDF.shape[0]}")


def _tile(padded_PX: jax.Array, t: jax.Array, tile: int) -> jax.Array:
    """Tile t of a padded buffer: its rows t x tile, ..., (t + 1) x tile - 1."""
    return jax.lax.dynamic_slice_in_dim(padded_PX, t * tile, tile)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _tiled(tile: int, x_AD: jax.Array, w_GDF: jax.Array, sizes_G: jax.Array) -> jax.Array:
    layout = _layout(x_AD.shape[0], sizes_G, tile)
    x_PD = _padded(x_AD, layout, tile)

    def group(g, y_PF):
        w_DF = jax.lax.dynamic_index_in_dim(w_GDF, g, keepdims=False)

        def one(t, y_PF):
            y_TF = _product(_tile(x_PD, t, tile), w_DF, ((1,), (0,)))
            return jax.lax.dynamic_update_slice_in_dim(y_PF, y_TF, t * tile, 0)

        with _scope_of_group_loops(layout, w_GDF):
            return jax.lax.fori_loop(layout.first_tile_G[g], layout.end_tile_G[g], one, y_PF)

    # Zeros `like` the rows: under `shard_map` the loops' carries vary as the rows do.
    y_PF = jnp.zeros_like(
        x_AD, shape=(layout.tiles * tile, w_GDF.shape[2]), dtype=_wide(x_AD, w_GDF)
    )
    y_PF = jax.lax.fori_loop(0, w_GDF.shape[0], group, y_PF)
    return narrow(_unpadded(y_PF, layout), jnp.result_type(x_AD, w_GDF))


def _tiled_fwd(tile, x_AD, w_GDF, sizes_G):
    return _tiled(tile, x_AD, w_GDF, sizes_G), (x_AD, w_GDF, sizes_G)


def _tiled_bwd(tile, residuals, dy_AF):
    x_AD, w_GDF, sizes_G = residuals
    layout = _layout(x_AD.shape[0], sizes_G, tile)
    x_PD = _padded(x_AD, layout, tile)
    dy_PF = _padded(dy_AF, layout, tile)  # a cotangent of the result: its dtype
    wide = _wide(x_AD, w_GDF)
    # The rows transposed once, [D, tiles x tile]: the kernel gradient's products take their
    # columns, as XLA:CPU's fast kernels want a [rows, contracted] operand.
    x_DP = x_PD.T

    def group(g, carry):
        dx_PD, dw_GDF = carry
        w_DF = jax.lax.dynamic_index_in_dim(w_GDF, g, keepdims=False)

        def one(t, carry):
            dx_PD, dw_DF = carry
            dy_TF = _tile(dy_PF, t, tile)
            dx_TD = _product(dy_TF, w_DF, ((1,), (1,)))
            x_DT = jax.lax.dynamic_slice_in_dim(x_DP, t * tile, tile, axis=1)
            dw_DF += _product(x_DT, dy_TF, ((1,), (0,)))
            return jax.lax.dynamic_update_slice_in_dim(dx_PD, dx_TD, t * tile, 0), dw_DF

        dw_DF = jnp.zeros_like(x_AD, shape=w_GDF.shape[1:], dtype=wide)
        start, end = layout.first_tile_G[g], layout.end_tile_G[g]
        with _scope_of_group_loops(layout, w_GDF):
            dx_PD, dw_DF = jax.lax.fori_loop(start, end, one, (dx_PD, dw_DF))
        dw_GDF = jax.lax.dynamic_update_index_in_dim(dw_GDF, narrow(dw_DF, w_GDF.dtype), g, 0)
        return dx_PD, dw_GDF

    dx_PD = jnp.zeros_like(x_AD, shape=x_PD.shape, dtype=wide)  # like the rows: see _tiled
    dw_GDF = jnp.zeros_like(x_AD, shape=w_GDF.shape, dtype=w_GDF.dtype)
    dx_PD, dw_GDF = jax.lax.fori_loop(0, w_GDF.shape[0], group, (dx_PD, dw_GDF))
    return narrow(_unpadded(dx_PD, layout), x_AD.dtype), dw_GDF, None


_tiled.defvjp(_tiled_fwd, _tiled_bwd)
