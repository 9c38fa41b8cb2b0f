"""Naming the host that holds a multi-host run back, while it trains.

In a synchronous step every host waits for the slowest one, so step times are the same on all
of them and a slow host shows only in what it does alone. Every `train.straggler_every` steps
each process measures two such things, and the processes compare them:

- its device rate: a chain of matmuls on its first local device, timed while no step is
  queued (a throttled, faulty or shared device; on CPUs, a host whose cores are busy);
- its data wait: the seconds per step its loop spent waiting for the next batch since the
  previous check (a slow file system, starved data workers).

A host is behind at a check when its device rate is under `train.straggler_fraction` of the
fastest host's, or when it waited for data longer than the least-waiting host by more than
(1 - fraction) of a step. One check behind is noise (another job's burst, a cache miss); a host
behind at `train.straggler_patience` checks in a row is named in the log, with its figures and
what to do, and named again when it is back in line. Every check's figures go into the metrics
of its step (`straggler/*`: metrics.jsonl, TensorBoard, wandb), so they can be followed over
the run. A single process has nothing to compare with and never checks.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrain.parallel import host_records

PROBE_SIZE = 1024  # the probe's square float32 matrices
PROBE_SECONDS = 0.02  # how long one probe should take: long enough to dwarf a launch's overhead
PROBE_REPEATS = 5
_MAX_CHAIN = 4096
_WIRE_BYTES = 512


@dataclasses.dataclass(frozen=True)
class HostFigures:
    """One process's figures at a check."""

    process: int
    host: str
    device_gflops: float  # the probe's rate on its first local device
    data_wait_s: float  # seconds per step waiting for the next batch since the last check
    step_s: float  # wall seconds per step since the last check (0 at the first check)


@dataclasses.dataclass(frozen=True)
class Behind:
    """A host behind the others at one check, and why."""

    process: int
    host: str
    reasons: tuple[str, ...]


def behind_hosts(figures: list[HostFigures], fraction: float) -> list[Behind]:
    """The hosts behind the others at one check (see the module docstring). A data wait is
    weighed against the longest step time a host measured (the same on every process, so that
    all judge alike); at the first check, which has no interval behind it, only the device
    rates are compared."""
    step_s = max(f.step_s for f in figures)
    fastest = max(f.device_gflops for f in figures)
    least_wait = min(f.data_wait_s for f in figures)
    found = []
    for f in figures:
        reasons = []
        if f.device_gflops < fraction * fastest:
            reasons.append(
                f"device {f.device_gflops:.3g} GFLOP/s, {f.device_gflops / fastest:.0%} of the "
                "fastest host's"
            )
        if step_s > 0 and f.data_wait_s - least_wait > (1.0 - fraction) * step_s:
            reasons.append(
                f"data wait {f.data_wait_s:.3g} s per step of {step_s:.3g} s (least on a host: "
                f"{least_wait:.3g} s)"
            )
        if reasons:
            found.append(Behind(f.process, f.host, tuple(reasons)))
    return found


class MatmulProbe:
    """Times a chain of matmuls on one device; the chain is as long as it takes to last about
    `PROBE_SECONDS` there (a dynamic trip count: one compile whatever the length)."""

    def __init__(self, device: Any):
        rng = np.random.default_rng(0)
        # An orthogonal factor keeps the chain's values bounded whatever its length.
        q, _ = np.linalg.qr(rng.standard_normal((PROBE_SIZE, PROBE_SIZE)))
        self._w = jax.device_put(q.astype(np.float32), device)
        self._x = jax.device_put(np.ones((PROBE_SIZE, PROBE_SIZE), np.float32), device)
        self._chain = jax.jit(lambda x, w, n: jax.lax.fori_loop(0, n, lambda _, y: y @ w, x))
        self._length: int | None = None

    def _seconds(self, length: int) -> float:
        n = jnp.asarray(length, jnp.int32)
        start = time.perf_counter()
        jax.block_until_ready(self._chain(self._x, self._w, n))
        return time.perf_counter() - start

    def gflops(self) -> float:
        """The median rate of `PROBE_REPEATS` timed chains: a host whose device or cores are
        shared is slow in most of them, a single stall elsewhere does not count."""
        if self._length is None:
            self._seconds(1)  # compiles
            length = 1
            while self._seconds(length) < PROBE_SECONDS and length < _MAX_CHAIN:
                length *= 2
            self._length = length
        seconds = float(np.median([self._seconds(self._length) for _ in range(PROBE_REPEATS)]))
        return 2 * PROBE_SIZE**3 * self._length / seconds / 1e9


class StragglerWatch:
    """Compares the hosts every `every` steps (0, or a single process: never).

    The trainer reports each batch's wait (`waited_for_data`) and, at a step where `due` holds
    and no later step is queued, calls `check`, which every process must reach: it returns the
    figures for that step's metrics and logs, through `log`, hosts that fell behind or
    recovered.
    """

    def __init__(self, every: int, patience: int, fraction: float, log: Callable[[str], None]):
        self.every = every if jax.process_count() > 1 else 0
        self.patience = max(patience, 1)
        self.fraction = fraction
        self._log = log
        self._probe: MatmulProbe | None = None
        self._data_wait = 0.0
        self._since: tuple[int, float] | None = None  # (step, time) of the previous check
        self._streaks: dict[int, int] = {}
        self._first_behind: dict[int, int] = {}
        self._named: set[int] = set()

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def waited_for_data(self, seconds: float) -> None:
        self._data_wait += seconds

    def check(self, step: int) -> dict[str, float]:
        """Measures this host, gathers every host's figures and judges them (see the module
        docstring); returns the `straggler/*` metrics of this step."""
        now = time.perf_counter()
        if self._probe is None:
            self._probe = MatmulProbe(jax.local_devices()[0])
        steps = step - self._since[0] if self._since else 0
        step_s = (now - self._since[1]) / steps if steps else 0.0
        mine = HostFigures(
            jax.process_index(),
            socket.gethostname(),
            self._probe.gflops(),
            self._data_wait / steps if steps else 0.0,
            step_s,
        )
        figures = [
            HostFigures(**r)
            for r in host_records.allgather_json(dataclasses.asdict(mine), _WIRE_BYTES)
        ]
        behind = self.judge(step, figures)
        self._data_wait, self._since = 0.0, (step, time.perf_counter())
        rates = [f.device_gflops for f in figures]
        waits = [f.data_wait_s for f in figures]
        slowest = min(figures, key=lambda f: f.device_gflops)
        return {
            "straggler/device_ratio": min(rates) / max(rates),
            "straggler/slowest_process": float(slowest.process),
            "straggler/data_wait_max_s": max(waits),
            "straggler/data_wait_min_s": min(waits),
            "straggler/behind": float(len(behind)),
        }

    def judge(self, step: int, figures: list[HostFigures]) -> list[Behind]:
        """The hosts behind at this check. Counts each host's checks behind in a row, and logs
        those that reach the patience and those named before that are back in line."""
        behind = behind_hosts(figures, self.fraction)
        now_behind = {b.process: b for b in behind}
        for process in list(self._streaks):
            if process not in now_behind:
                del self._streaks[process]
                self._first_behind.pop(process, None)
        for b in behind:
            self._streaks[b.process] = self._streaks.get(b.process, 0) + 1
            self._first_behind.setdefault(b.process, step)
            if self._streaks[b.process] == self.patience and b.process not in self._named:
                self._named.add(b.process)
                since = self._first_behind[b.process]
                self._log(
                    f"straggler: process {b.process} ({b.host}) has been behind the other "
                    f"processes at {self.patience} checks in a row (steps {since}-"
                    f"{step}): {'; '.join(b.reasons)}. Every step waits for it: check that "
                    "host (`python -m jaxtrain preflight` under the same launcher), or "
                    "restart without it."
                )
        for process in sorted(self._named - set(now_behind)):
            self._named.discard(process)
            host = next(f.host for f in figures if f.process == process)
            self._log(f"straggler: process {process} ({host}) is back in line at step {step}")
        return behind
