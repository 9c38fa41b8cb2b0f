"""Goodput: how much of a run's wall time made progress, and where the rest went.

Each start of a run appends to `<run dir>/events.jsonl` (process 0 writes for all):

- `start`: when the process started (the kernel's record of it, so imports, data preparation
  and the restore count) and the step it resumed from;
- `ready`: when its first step was about to be dispatched, with the compile time;
- `steps`: every logged step, the interval since the previous event: its wall time and the
  parts of it that were host work, not training (`data_wait` for the next batch, `checkpoint`
  blocking the loop, `eval`);
- `exit`: an orderly end (finished, stopped by a signal, or an error the trainer raised). A
  start without one ended in a crash (SIGKILL, out of memory, a lost host).

`summarize` reads them back the way MaxText's goodput measurement does: goodput is the step
time that survived (training minus the host work inside it) over the wall time since the
first start; badput is the rest, by cause: startup, compile, data wait, checkpoints,
evaluation, the time a crashed run was down before its restart, time between a stop and the
next start, the steps computed after the checkpoint a restart went back to (recomputed, so
lost), and what is left (logging, the last steps before a crash, shutdown).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

EVENTS_FILE = "events.jsonl"
HOST_WORK = ("data_wait", "checkpoint", "eval")


def process_start_time() -> float:
    """Unix time this process started (Linux: /proc; elsewhere the time of this call).

    From the seconds since boot, not /proc/stat's boot time, which is whole seconds only.
    """
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


class EventLog:
    """Appends the run's events; does nothing where `enabled` is false (processes but 0).

    The file is opened at the first event, so a Trainer that trains nothing (a rerun of a
    finished run) leaves the run directory as it was.
    """

    def __init__(self, run_dir: Path, enabled: bool = True, clock=time.time):
        self.path = Path(run_dir) / EVENTS_FILE
        self.enabled = enabled
        self._clock = clock
        self._since = 0.0  # the end of the last interval written
        self._first = 0  # the first step of the open interval
        self._spent = dict.fromkeys(HOST_WORK, 0.0)

    def _write(self, event: str, **fields: Any) -> None:
        if not self.enabled:
            return
        record = {"event": event, "time": self._clock(), **fields}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:  # one short line per write: appends stay whole
            f.write(json.dumps(record) + "\n")

    def ready(self, step: int, compile_s: float, compile_cached: bool = False) -> None:
        """Training starts at `step` (this process's first `run`), compiled in `compile_s`
        (loaded from the persistent compilation cache when `compile_cached`)."""
        if self._since:  # a later run() of the same Trainer (a notebook): the same start;
            # the time since its last run() is no step time, it stays "other"
            self._since, self._first = self._clock(), step + 1
            self._spent = dict.fromkeys(HOST_WORK, 0.0)
            return
        self._write("start", time=process_start_time(), step=step, pid=os.getpid())
        self._write("ready", step=step, compile_s=compile_s, compile_cached=compile_cached)
        self._since, self._first = self._clock(), step + 1

    @contextlib.contextmanager
    def timing(self, kind: str, also: Callable[[float], None] | None = None) -> Iterator[None]:
        """Counts the block's wall time as host work of `kind` (one of HOST_WORK), and hands
        the seconds to `also` when given (another account of the same wait)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self._spent[kind] += seconds
            if also is not None:
                also(seconds)

    def steps_done(self, step: int) -> None:
        """Steps up to `step` are done: writes the interval since the last one."""
        if not self._since or step < self._first:
            return
        now = self._clock()
        self._write("steps", first=self._first, last=step, wall=now - self._since, **self._spent)
        self._since, self._first = now, step + 1
        self._spent = dict.fromkeys(HOST_WORK, 0.0)

    def exit(self, step: int) -> None:
        """An orderly end at `step`, with the host work since the last interval (the final
        checkpoint, evaluation, waiting for saves)."""
        if self._since:
            self.steps_done(step)
            wall = self._clock() - self._since
            self._write("exit", step=step, wall=wall, **self._spent)


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    """The events of a run directory, in order (lines cut short by a crash skipped)."""
    path = Path(run_dir) / EVENTS_FILE
    if not path.is_file():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "event" in record and "time" in record:
            events.append(record)
    return events


@dataclasses.dataclass
class Goodput:
    """Where a run's wall time went, in seconds."""

    wall: float  # first start to the last event
    productive: float  # step time that survived
    badput: dict[str, float]  # cause -> seconds
    starts: int
    crashes: int  # starts that ended without an exit and were restarted
    recomputed: list[tuple[int, int]]  # step ranges computed again after a restart

    @property
    def fraction(self) -> float:
        """Goodput: productive time over wall time."""
        return self.productive / self.wall if self.wall > 0 else 0.0


def _attempts(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    attempts: list[list[dict[str, Any]]] = []
    for event in events:
        if event["event"] == "start":
            attempts.append([event])
        elif attempts:
            attempts[-1].append(event)
    return attempts


def summarize(events: list[dict[str, Any]]) -> Goodput | None:
    """The goodput of a run's events; None before its first start."""
    attempts = _attempts(events)
    if not attempts:
        return None
    bad = dict.fromkeys(
        (
            "startup",
            "compile",
            "data wait",
            "checkpoints",
            "evaluation",
            "down after a crash",
            "stopped between starts",
            "recomputed steps",
        ),
        0.0,
    )
    productive, recomputed, crashes = 0.0, [], 0
    first_start = attempts[0][0]["time"]
    end = max(e["time"] for e in events)
    for k, attempt in enumerate(attempts):
        start = attempt[0]
        # A later start that resumed from an earlier step made this one's steps after it lost.
        later = [a[0].get("step", 0) for a in attempts[k + 1 :]]
        kept_up_to = min(later) if later else None
        ready = next((e for e in attempt if e["event"] == "ready"), None)
        if ready is not None:
            compile_s = float(ready.get("compile_s", 0.0))
            bad["compile"] += compile_s
            bad["startup"] += max(ready["time"] - start["time"] - compile_s, 0.0)
        lost: list[tuple[int, int]] = []
        for e in attempt:
            if e["event"] not in ("steps", "exit"):
                continue
            host = [float(e.get(kind, 0.0)) for kind in HOST_WORK]
            for name, seconds in zip(("data wait", "checkpoints", "evaluation"), host):
                bad[name] += seconds
            if e["event"] == "exit":  # the rest of its wall time is shutdown: "other"
                continue
            steps_time = max(float(e["wall"]) - sum(host), 0.0)
            first, last = int(e["first"]), int(e["last"])
            if kept_up_to is not None and last > kept_up_to:
                gone = last - max(first - 1, kept_up_to)
                bad["recomputed steps"] += steps_time * gone / (last - first + 1)
                steps_time *= 1 - gone / (last - first + 1)
                lost.append((max(first, kept_up_to + 1), last))
            productive += steps_time
        if lost:
            recomputed.append((lost[0][0], lost[-1][1]))
        ended = attempt[-1]["time"]
        crashed = attempt[-1]["event"] != "exit"
        if k + 1 < len(attempts):
            crashes += crashed
            gap = max(attempts[k + 1][0]["time"] - ended, 0.0)
            bad["down after a crash" if crashed else "stopped between starts"] += gap
    wall = max(end - first_start, 0.0)
    bad = {name: seconds for name, seconds in bad.items() if seconds > 0}
    bad["other"] = max(wall - productive - sum(bad.values()), 0.0)
    return Goodput(wall, productive, bad, len(attempts), crashes, recomputed)
