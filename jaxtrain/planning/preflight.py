"""Checking every host before a run spends its allocation (`python -m jaxtrain preflight`).

Started by the same launcher and options as training, every process measures its own host,
then process 0 prints one table, a row per process, and names the hosts that fail or are slow:

- mesh: the config's mesh is built from every process's devices (`run.setup`), which refuses
  a device count that does not fit; the device kind must be process 0's;
- memory: the train state and one batch per device (the memory plan, before compiling: the
  step's activations come on top) against the device's free memory (host memory on CPUs);
- matmul: a timed float32 matmul on this host's first device, no collective involved, so a host
  that is throttled, busy or has a bad device stands out;
- all-reduce and all-gather over every device of every process, timed (bus bandwidth per
  device, GB/s, as NCCL's tests count it): a slow link slows every host's figure alike, and
  the figure shows it against what the interconnect should give;
- checkpoint: writing and syncing `CKPT_PROBE_BYTES` in the checkpoint folder (MB/s), which
  every host must be able to write;
- data: every path of `data.paths` exists on this host.

A host is slow when its matmul rate is below `SLOW_FRACTION` of the best host's, or its
checkpoint write speed below `SLOW_WRITE_FRACTION` of the best host's. The collectives are
slow when their bus bandwidth is below `SLOW_LINK_FRACTION` of what the device kind's links
should give (`jaxtrain.planning.hardware`: inside a host, or across hosts when the processes
are on several), for the kinds that table knows. Results travel between processes as fixed-size JSON in one `process_allgather`.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from ml_collections import ConfigDict

from jaxtrain import run as run_lib
from jaxtrain.config import loader as config_lib
from jaxtrain.errors import JaxtrainError
from jaxtrain.parallel import host_records
from jaxtrain.planning import hardware
from jaxtrain.planning import memory as memory_plan

SLOW_FRACTION = 0.5
# File systems vary more from one write to the next (caches, other jobs' traffic).
SLOW_WRITE_FRACTION = 0.25
# Planning figures, not a given cluster's: only a link far below them is reported.
SLOW_LINK_FRACTION = 0.5
CKPT_PROBE_BYTES = 32 * 2**20
COLLECTIVE_BYTES = 16 * 2**20  # per device
MATMUL_SIZE = 1024
REPEATS = 10
_WIRE_BYTES = 8192  # one host's JSON row, padded, in the all-gather


@dataclasses.dataclass
class HostCheck:
    """One process's figures and the problems found on its host."""

    process: int
    host: str
    devices: int
    kind: str
    need_gib: float | None = None
    free_gib: float | None = None
    matmul_gflops: float = 0.0
    allreduce_gbps: float = 0.0
    allgather_gbps: float = 0.0
    ckpt_mbps: float | None = None
    data: str = "-"
    problems: list[str] = dataclasses.field(default_factory=list)


def _timed(fn: Callable[[], Any]) -> float:
    """Fewest seconds of `fn()` (its result waited for) in REPEATS, after a warm-up call: the
    best of several is what the host can do, a transient stall elsewhere does not count, and
    a host that is slow throughout stays slow in every repeat."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return min(times)


def _matmul_gflops() -> float:
    """float32 GFLOP/s of one matmul on this host's first device."""
    device = jax.local_devices()[0]
    a = jax.device_put(np.ones((MATMUL_SIZE, MATMUL_SIZE), np.float32), device)
    matmul = jax.jit(lambda x: x @ x)
    return 2 * MATMUL_SIZE**3 / _timed(lambda: matmul(a)) / 1e9


def _collectives() -> tuple[float, float]:
    """Bus bandwidth (GB/s per device) of an all-reduce and an all-gather over every device."""
    devices = jax.devices()
    n = len(devices)
    if n < 2:
        return 0.0, 0.0
    mesh = Mesh(np.array(devices), ("all",))
    per = COLLECTIVE_BYTES // 4
    x = jax.make_array_from_callback(
        (n, per), NamedSharding(mesh, PartitionSpec("all")), lambda idx: np.ones((1, per), "f4")
    )
    whole = NamedSharding(mesh, PartitionSpec())
    reduce = jax.jit(lambda a: a.sum(axis=0), out_shardings=whole)
    gather = jax.jit(lambda a: a * 1.0, out_shardings=whole)
    ring = (n - 1) / n  # the share of the data each device sends in a ring
    reduce_s = _timed(lambda: reduce(x))
    gather_s = _timed(lambda: gather(x))
    return (
        2 * ring * COLLECTIVE_BYTES / reduce_s / 1e9,
        ring * n * COLLECTIVE_BYTES / gather_s / 1e9,
    )


def _checkpoint_write(directory: Path) -> tuple[float | None, str | None]:
    """(MB/s writing and syncing a probe file in the checkpoint folder, or the error)."""
    probe = directory / f".preflight-{jax.process_index()}-{socket.gethostname()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        data = os.urandom(CKPT_PROBE_BYTES)
        start = time.perf_counter()
        with open(probe, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        seconds = time.perf_counter() - start
        return CKPT_PROBE_BYTES / seconds / 1e6, None
    except OSError as e:
        return None, f"checkpoint folder {directory} is not writable here ({e.strerror or e})"
    finally:
        probe.unlink(missing_ok=True)


def _data_paths(cfg: ConfigDict) -> tuple[str, list[str]]:
    """('ok (N paths)' or '-', the paths of data.paths missing on this host)."""
    if cfg.data.kind == "synthetic":
        return "synthetic", []
    paths = [p.strip() for p in str(cfg.data.paths).split(",") if p.strip()]
    # A Megatron path is a prefix of .bin/.idx files.
    missing = [p for p in paths if not (Path(p).exists() or Path(p + ".bin").exists())]
    return (f"{len(paths) - len(missing)}/{len(paths)} paths", missing)


def check_host(cfg: ConfigDict) -> HostCheck:
    """Measures this process's host (every process must call it: it runs collectives)."""
    local = jax.local_devices()
    check = HostCheck(jax.process_index(), socket.gethostname(), len(local), local[0].device_kind)
    try:
        setup = run_lib.setup(cfg, check_data=False)
    except JaxtrainError as e:
        check.problems.append(f"mesh: {e}")
    else:
        plan = memory_plan.plan_state(
            setup.layout.abstract, setup.abstract_batch(), setup.axis_sizes
        )
        capacity, source = memory_plan.device_capacity(local)
        check.need_gib = plan.total / memory_plan.GIB
        if capacity is not None:
            check.free_gib = capacity / memory_plan.GIB
            if plan.total > capacity:
                check.problems.append(
                    f"memory: state and batch need {memory_plan.gib(plan.total)} per device, "
                    f"{source} is {memory_plan.gib(capacity)}"
                )
    check.matmul_gflops = _matmul_gflops()
    check.allreduce_gbps, check.allgather_gbps = _collectives()
    check.ckpt_mbps, error = _checkpoint_write(config_lib.checkpoint_dir(cfg))
    if error:
        check.problems.append(error)
    check.data, missing = _data_paths(cfg)
    if missing:
        check.problems.append(f"data: missing here: {', '.join(missing)}")
    return check


def gather(check: HostCheck) -> list[HostCheck]:
    """Every process's check, in process order (on every process)."""
    return [
        HostCheck(**r) for r in host_records.allgather_json(dataclasses.asdict(check), _WIRE_BYTES)
    ]


def judge(checks: list[HostCheck]) -> list[HostCheck]:
    """Adds the problems only a comparison of hosts shows: another device kind, a slow host."""
    kind = checks[0].kind
    across_hosts = len({c.host for c in checks}) > 1
    expected = hardware.expected_bus_gbs(kind, across_hosts)
    best_matmul = max(c.matmul_gflops for c in checks)
    writes = [c.ckpt_mbps for c in checks if c.ckpt_mbps]
    best_write = max(writes) if writes else None
    for c in checks:
        if c.kind != kind:
            c.problems.append(f"devices: {c.kind}, process 0 has {kind}")
        if c.matmul_gflops < SLOW_FRACTION * best_matmul:
            c.problems.append(
                f"slow: matmul {c.matmul_gflops:.3g} GFLOP/s, {c.matmul_gflops / best_matmul:.0%} "
                "of the fastest host's (a busy, throttled or faulty host)"
            )
        if best_write and c.ckpt_mbps and c.ckpt_mbps < SLOW_WRITE_FRACTION * best_write:
            c.problems.append(
                f"slow: checkpoint write {c.ckpt_mbps:.3g} MB/s, "
                f"{c.ckpt_mbps / best_write:.0%} of the fastest host's"
            )
        if expected and len(checks) * c.devices > 1:
            name, gbs = expected
            for what, got in (("all-reduce", c.allreduce_gbps), ("all-gather", c.allgather_gbps)):
                if got < SLOW_LINK_FRACTION * gbs:
                    c.problems.append(
                        f"slow: {what} {got:.3g} GB/s per device, {got / gbs:.0%} of the "
                        f"{gbs:g} GB/s expected of {name} links "
                        + ("across hosts (the network)" if across_hosts else "inside a host")
                    )
    return checks


def table(checks: list[HostCheck]) -> str:
    """The per-host table and, below it, one line per problem naming its host."""
    header = (
        "process",
        "host",
        "devices",
        "kind",
        "memory need/free GiB",
        "matmul GFLOP/s",
        "all-reduce GB/s",
        "all-gather GB/s",
        "checkpoint MB/s",
        "data",
        "verdict",
    )

    def fmt(x: float | None) -> str:
        return "?" if x is None else f"{x:.3g}"

    rows = [
        (
            str(c.process),
            c.host,
            str(c.devices),
            c.kind,
            f"{fmt(c.need_gib)}/{fmt(c.free_gib)}",
            fmt(c.matmul_gflops),
            fmt(c.allreduce_gbps),
            fmt(c.allgather_gbps),
            fmt(c.ckpt_mbps),
            c.data,
            "FAIL" if c.problems else "ok",
        )
        for c in checks
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in [header, *rows]]
    for c in checks:
        lines += [f"process {c.process} ({c.host}): {p}" for p in c.problems]
    return "\n".join(line.rstrip() for line in lines)
