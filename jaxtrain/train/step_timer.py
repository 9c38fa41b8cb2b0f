"""Wall time between completed train steps, the basis of the logged tokens/s, step time and MFU.

Steps are dispatched asynchronously and the loop learns that step N is done when it reads N's
metrics, one step behind the dispatch. While the host waits on the device, the time between two
such reads is the time between two completions. After host work the device could overlap (the
compile of the first step, an evaluation, a checkpoint write), the next read may return at once
for a step that finished long before; counting it would report a step time near zero. So such
work restarts the window: the next completion opens it and is not counted.
"""

from __future__ import annotations

import time


class StepTimer:
    """Counts completed steps and the seconds they took since the window opened."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._start: float | None = None  # when the window opened (a completion), or None
        self._last = 0.0  # the latest counted completion
        self._steps = 0

    def interrupted(self) -> None:
        """Host work happened: the next completion reopens the window instead of counting."""
        self._start = None
        self._steps = 0

    def completed(self) -> None:
        """A step's result has just been read."""
        now = self._clock()
        if self._start is None:
            self._start, self._last, self._steps = now, now, 0
        else:
            self._last, self._steps = now, self._steps + 1

    def take(self) -> tuple[int, float] | None:
        """(steps, seconds) counted since the window opened, then a new window from the last
        completion; None when no step has been timed since (right after an interruption)."""
        if self._start is None or self._steps == 0:
            return None
        window = (self._steps, self._last - self._start)
        self._start, self._steps = self._last, 0
        return window
