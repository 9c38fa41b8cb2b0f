"""Wall time between completed train steps, the basis of the logged tokens/s, step time and MFU.

Steps are dispatched asynchronously and the loop learns that step N is done when it reads N's
metrics, one step behind the dispatch: it dispatches N+1, then reads N. In that rhythm the time
between two reads is one loop cycle (loading and dispatching one step, reading one, and waiting
for the device), and the slower of host and device sets the pace. Only reads in that rhythm are
counted, so every window holds exactly one dispatch per counted step.

Host work the device could overlap (an evaluation, a checkpoint copy) breaks the rhythm: the
step queued before it may finish meanwhile and its read then returns at once, which once made
the steps after an evaluation look 50 times faster. After such work the window opens once the
next step has been dispatched, and counts only steps dispatched from then on. A step read right
after its own dispatch (before a checkpoint, or at the end of a run) is not in the rhythm either:
its window would lack the next step's loading and look faster than the run is.

A run's first step counts as host work too: its wall time is first-touch allocations, and
reading it opens the metric files.

Where one window ends the next begins, and that boundary must not fall after the device began
the next window's first step. When the host had to wait for step N (its result was not ready
when asked for), N just finished and N+1, queued before, starts now: the read is the boundary.
When N was already done (the host came late: a pause of the Python thread, another process on
the cores, a slow metric write), N+1 may have been running since it was queued, and a window
from the read would miss that part of it: with `train.log_every=1` such a window once gave an
MFU of 1.345. The next window then opens when N+1 was queued instead. A window thus always
holds all the device time of the steps it counts (MFU can only be under-, never overstated),
and in the common rhythm adjacent windows overlap by no more than one queueing call.
"""

from __future__ import annotations

import time
from typing import Any

import jax


class StepTimer:
    """Counts completed steps and the seconds they took since the window opened."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._start: float | None = None  # when the window opened, or None
        self._first_counted = 0  # the lowest step number the open window counts
        self._armed = False  # the window opens after the next dispatch
        self._newest_dispatched = 0
        self._last = 0.0  # the latest counted completion
        self._next_start = 0.0  # where the window after the latest counted step begins
        self._queued_at = 0.0  # when the newest dispatched step was queued
        self._steps = 0

    def started(self) -> None:
        """A run begins: nothing is counted until its first step has been read."""
        self._start, self._steps, self._armed = None, 0, False

    def interrupted(self) -> None:
        """Host work happened: the window reopens once the next step has been dispatched."""
        self._start, self._steps, self._armed = None, 0, True

    def dispatched(self, step_no: int) -> None:
        """Step `step_no` has been loaded and is being queued on the devices (called right
        before the queueing call: the device cannot start it earlier)."""
        now = self._clock()
        self._newest_dispatched, self._queued_at = step_no, now
        if self._start is None and self._armed:
            self._start, self._last, self._first_counted, self._armed = now, now, step_no, False
            self._next_start = now

    def completed(self, step_no: int, waited: bool = True) -> None:
        """Step `step_no`'s result has just been read; `waited`: it was not ready when the host
        asked for it. The caller interrupts the window (or ends the run) after reading a step
        before dispatching the next one."""
        now = self._clock()
        if self._start is None:
            self._armed = True  # no-op after host work; a run's first step ends here
            return
        if self._first_counted <= step_no < self._newest_dispatched:
            self._last, self._steps = now, self._steps + 1
            # Not waited for: the next step may have run since it was queued (module docstring).
            self._next_start = now if waited else self._queued_at

    def read(self, step_no: int, device_metrics: Any) -> Any:
        """Waits for step `step_no`'s metrics, marks it completed and returns them on the host."""
        waited = not all(leaf.is_ready() for leaf in jax.tree_util.tree_leaves(device_metrics))
        values = jax.device_get(device_metrics)
        self.completed(step_no, waited)
        return values

    def take(self) -> tuple[int, float] | None:
        """(steps, seconds) counted since the window opened, then a new window from the last
        completion; None when no step has been timed since (right after an interruption)."""
        if self._start is None or self._steps == 0:
            return None
        window = (self._steps, self._last - self._start)
        self._start, self._steps = self._next_start, 0
        return window
