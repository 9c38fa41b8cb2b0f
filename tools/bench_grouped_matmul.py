"""The experts' grouped matmul on this machine: `jax.lax.ragged_dot` against jaxtrain's tiles
(jaxtrain/models/layers/grouped_matmul.py), forward and backward, side by side.

    python tools/bench_grouped_matmul.py [--rows 4096] [--dims 256x512] [--groups 8]
        [--dtypes float32,bfloat16] [--tiles 64,128,256] [--rounds 7]

The rows go to the groups at random, as a router spreads them, and each contender computes
the gradients of sum(y x c) for rows x, weights w and a fixed c, compiled once. The rounds
time every contender in turn, so a machine that gets busier or quieter affects all of them
alike. Prints the CPU (model, instruction sets, what the backend picks) and one markdown
table: milliseconds per forward + backward (median of the rounds) and the time relative to
`ragged_dot`. docs/performance.md#hardware-choices holds the figures of runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a clone

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxtrain.hardware import backend  # noqa: E402
from jaxtrain.hardware.host_info import cpu_line  # noqa: E402
from jaxtrain.models.layers import grouped_matmul  # noqa: E402

RAGGED = "jax.lax.ragged_dot"


def contenders(tiles: list[int]) -> dict:
    """{name: grouped matmul (x, w, sizes) -> y}: ragged_dot and the tiles at each size."""
    out = {RAGGED: jax.lax.ragged_dot}
    for tile in tiles:
        out[f"tiles of {tile} rows"] = lambda x, w, s, tile=tile: grouped_matmul.tiled(
            x, w, s, tile
        )
    return out


def timed_gradients(rows: int, d: int, f: int, groups: int, dtype, tiles: list[int], rounds: int):
    """{contender: median seconds of one forward + backward} for this shape and dtype."""
    rng = np.random.default_rng(0)
    sizes = jnp.asarray(np.bincount(rng.integers(0, groups, rows), minlength=groups), jnp.int32)
    x = jnp.asarray(rng.standard_normal((rows, d)), dtype)
    w = jnp.asarray(rng.standard_normal((groups, d, f)) / np.sqrt(d), dtype)
    c = jnp.asarray(rng.standard_normal((rows, f)), dtype)
    steps = {}
    for name, matmul in contenders(tiles).items():

        def loss(x, w, matmul=matmul):
            return jnp.sum((matmul(x, w, sizes) * c).astype(jnp.float32))

        steps[name] = jax.jit(jax.grad(loss, argnums=(0, 1)))
        jax.block_until_ready(steps[name](x, w))  # compiles
        jax.block_until_ready(steps[name](x, w))
    seconds = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            jax.block_until_ready(step(x, w))
            seconds[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in seconds.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_grouped_matmul")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--dims", default="256x512", help="D x F of each group's weights")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--tiles", default="64,128,256", help="tile sizes (rows) to time")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    d, f = (int(n) for n in args.dims.split("x"))
    tiles = [int(n) for n in args.tiles.split(",")]

    chosen = backend.detect()
    isa = sorted(chosen.cpu_flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"})
    print(f"CPU: {cpu_line()} ({', '.join(isa) or 'no AVX2'}); {chosen.describe()}")
    print(f"{args.rows} rows x [{d}, {f}] weights in {args.groups} groups, forward + backward\n")
    print("| dtype | contender | ms | relative to ragged_dot |")
    print("|---|---|---|---|")
    for dtype in args.dtypes.split(","):
        times = timed_gradients(args.rows, d, f, args.groups, dtype, tiles, args.rounds)
        for name, seconds in times.items():
            print(f"| {dtype} | {name} | {seconds * 1e3:.1f} | {seconds / times[RAGGED]:.2f} |")
    return 0


if __name__ == "__main__":
    from jaxtrain.hardware.host_malloc import reexec_with_tuned_malloc

    reexec_with_tuned_malloc()  # the malloc settings `python -m jaxtrain` runs with
    raise SystemExit(main(sys.argv[1:]))
