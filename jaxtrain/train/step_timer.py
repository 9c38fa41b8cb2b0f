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
"""

from __future__ import annotations

import time


class StepTimer:
    """Counts completed steps and the seconds they took since the window opened."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._start: float | None = None  # when the window opened, or None
        self._first_counted = 0  # the lowest step number the open window counts
        self._armed = False  # the window opens after the next dispatch
        self._newest_dispatched = 0
        self._last = 0.0  # the latest counted completion
        self._steps = 0

    def started(self) -> None:
        """A run begins: nothing is counted until its first step has been read."""
        self._start, self._steps, self._armed = None, 0, False

    def interrupted(self) -> None:
        """Host work happened: the window reopens once the next step has been dispatched."""
        self._start, self._steps, self._armed = None, 0, True

    def dispatched(self, step_no: int) -> None:
        """Step `step_no` has been loaded and queued on the devices."""
        self._newest_dispatched = step_no
        if self._start is None and self._armed:
            now = self._clock()
            self._start, self._last, self._first_counted, self._armed = now, now, step_no, False

    def completed(self, step_no: int) -> None:
        """Step `step_no`'s result has just been read. The caller interrupts the window (or
        ends the run) after reading a step before dispatching the next one."""
        now = self._clock()
        if self._start is None:
            self._armed = True  # no-op after host work; a run's first step ends here
            return
        if self._first_counted <= step_no < self._newest_dispatched:
            self._last, self._steps = now, self._steps + 1

    def take(self) -> tuple[int, float] | None:
        """(steps, seconds) counted since the window opened, then a new window from the last
        completion; None when no step has been timed since (right after an interruption)."""
        if self._start is None or self._steps == 0:
            return None
        window = (self._steps, self._last - self._start)
        self._start, self._steps = self._last, 0
        return window
