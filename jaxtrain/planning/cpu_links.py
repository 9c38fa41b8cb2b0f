"""The planner's figures for fake CPU devices, measured on this host.

    python -m jaxtrain.planning.cpu_links N      (prints a JSON object)

Planning for `--device-kind cpu` plans N fake devices that share one host's cores and memory.
A collective between them is a memory copy done by those same cores, so its cost is neither
a link's data sheet nor hidden behind the matmuls: the figures are measured here, in a child
process that has the N devices (XLA reads the device count once, when jax starts).

- `intra_gbs` / `inter_gbs`: bus bandwidth per device of an all-reduce over all N devices
  (nccl-tests' `busbw`: 2 (N - 1) / N x the bytes per device, over the time), from the
  difference between a 4 MiB and a 4 KiB all-reduce;
- `latency_intra_us` / `latency_inter_us`: the time of a small all-reduce, from a program of
  eight chained ones against a program of one (so that launching a program does not count);
- `hbm_gbs`: memory bandwidth per device, from an elementwise update (two arrays read, one
  written) that every device runs at once, as an optimizer update does.

Each figure is the best of several runs: on a shared machine the slow runs measure the
other processes. Eight fake devices of a 2-core Intel Xeon (AMX) measured 1.5-3.5 GB/s and
41-55 us per all-reduce and about 3 GB/s of memory bandwidth each, where the static table
had said 10 GB/s and 10 us.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from jaxtrain.planning import compile_worker

SMALL_BYTES = 4 << 10  # per device: the all-reduce that measures latency
LARGE_BYTES = 4 << 20  # per device: the one that measures bandwidth
CHAINED = 8  # small all-reduces in the program that measures latency
REPEATS = 12


def measured(devices: int) -> dict[str, float]:
    """The figures of the module docstring for `devices` fake devices on this host."""
    out = subprocess.run(
        [sys.executable, "-m", "jaxtrain.planning.cpu_links", str(devices)],
        env=compile_worker.environment(devices, fast_compile=False),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        raise RuntimeError(f"measuring {devices} fake CPU devices failed: {out.stderr[-1000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _best_time(fn, *args) -> float:
    fn(*args).block_until_ready()
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn(*args).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return best


def _measure_here() -> dict[str, float]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    n = jax.device_count()
    mesh = Mesh(np.array(jax.devices()), ("d",))
    split = NamedSharding(mesh, P("d"))

    def per_device(nbytes: int) -> jax.Array:
        return jax.device_put(jnp.ones((n, nbytes // 4), jnp.float32), split)

    def program(step, count=1):
        def body(*a):
            out = step(*a)
            for _ in range(count - 1):
                out = step(out, *a[1:])
            return out

        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d")))

    def seconds(fn, nbytes: int, arrays: int = 1) -> float:
        return _best_time(fn, *[per_device(nbytes) for _ in range(arrays)])

    # Latency: programs of CHAINED and of one small all-reduce differ by CHAINED - 1 of them,
    # not by a program's dispatch (scaled so the values stay put; XLA cannot fuse collectives).
    scaled = lambda a: jax.lax.psum(a, "d") * (1.0 / n)  # noqa: E731
    chained = seconds(program(scaled, CHAINED), SMALL_BYTES)
    small = max(chained - seconds(program(scaled), SMALL_BYTES), 0.0) / (CHAINED - 1)
    # Bandwidth and memory bandwidth: one program of each size, differing by the bytes alone.
    reduce = program(lambda a: jax.lax.psum(a, "d"))
    link_s = max(seconds(reduce, LARGE_BYTES) - seconds(reduce, SMALL_BYTES), 1e-9)
    update = program(lambda a, b: a * 0.999 + b)  # reads two arrays, writes one
    memory_s = max(seconds(update, LARGE_BYTES, 2) - seconds(update, SMALL_BYTES, 2), 1e-9)
    hbm_gbs = 3 * (LARGE_BYTES - SMALL_BYTES) / memory_s / 1e9
    # One device has no links (and no collectives to cost): its copy rate stands in.
    gbs = 2 * (n - 1) / n * (LARGE_BYTES - SMALL_BYTES) / link_s / 1e9 if n > 1 else hbm_gbs
    return {
        "intra_gbs": gbs,
        "inter_gbs": gbs,
        "latency_intra_us": small * 1e6,
        "latency_inter_us": small * 1e6,
        "hbm_gbs": hbm_gbs,
    }


if __name__ == "__main__":
    import jax

    if jax.device_count() != int(sys.argv[1]):
        sys.exit(f"cpu_links: jax has {jax.device_count()} devices, not {sys.argv[1]}")
    print(json.dumps(_measure_here()))
