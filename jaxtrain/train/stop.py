"""Stopping a run early on SIGTERM/SIGINT: finish a step, save it, exit 0.

One process: the first signal asks the loop to stop after the step in flight; a second one aborts
at once (KeyboardInterrupt) without a checkpoint. The train command installs the handlers before
anything is built, so a signal while the step compiles or the state is restored stops the run
before its first step (nothing to save), instead of killing it silently. Python runs a handler
only between bytecodes: a signal during a long native call (XLA compiling) takes effect when
that call returns.

Several processes: every process runs the same collectives, so they must stop after the same
step, whichever of them was signalled and however far apart the signals came (a scheduler or a
preemption notice reaches hosts at different moments). JAX's preemption service does this: it
catches SIGTERM in each process, tells the coordination service, and `reached_preemption_sync_point
(step)` turns true at the same step everywhere (the step after the furthest one any process had
reached). SIGTERM is therefore left to JAX's handler; SIGINT (Ctrl-C) is forwarded to it as a
SIGTERM, so both stop the same way. A second SIGINT still aborts.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Any

import jax
from jax.experimental import multihost_utils

from jaxtrain.parallel import distributed


def _coordinated() -> bool:
    """Whether JAX's preemption service watches SIGTERM in this multi-process run.

    Its handler is installed from C++ when jax.distributed starts (Python's `getsignal` does not
    see it), so this module never installs a Python SIGTERM handler over it.
    """
    return jax.process_count() > 1 and distributed.preemption_service_running()


class StopRequests:
    """Turns signals into a stop at a step every process agrees on.

    Usage: `with stops.handling(): stops.start(step); ... if stops.stop_after(step): ...`.
    `log` prints a line on the primary process. `training` is true while steps are dispatched
    (the signal is then acknowledged at once: the stop comes after the step in flight).
    """

    def __init__(self, log: Callable[[str], None]):
        self._log = log
        self.signal: int | None = None  # the first signal this process saw (one process)
        self.stopped_at: int | None = None  # the step the run stopped after, once agreed
        self.aborted = False  # a second signal: exit without waiting for anything
        self.coordinated = False
        self.training = False

    @property
    def requested(self) -> bool:
        """Whether the loop must stop dispatching steps."""
        return self.stopped_at is not None

    @property
    def reason(self) -> str:
        """What stopped the run, for the final log line."""
        if self.signal is not None:
            return signal.Signals(self.signal).name
        return "SIGTERM or a preemption notice on one of the processes"

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        """Installs the handlers for the duration of the block, then restores the previous ones
        (blocks may nest: the train command's whole run, and each `Trainer.run` in it)."""
        self.coordinated = _coordinated()
        previous: dict[int, Any] = {}
        signals = (signal.SIGINT,) if self.coordinated else (signal.SIGTERM, signal.SIGINT)
        for sig in signals:
            try:
                previous[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread (e.g. some notebook kernels)
                pass
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.signal is not None:
            self.aborted = True
            raise KeyboardInterrupt(f"second signal {signum}: aborting without a checkpoint")
        self.signal = signum
        if self.coordinated:
            self._log(f"\nsignal {signum}: asking every process to stop after the same step")
            signal.raise_signal(signal.SIGTERM)  # JAX's handler takes it from here
        elif self.training:
            self._log(f"\nsignal {signum}: finishing this step, then saving a checkpoint")
        # Before the first step nothing is said yet: the run stops with one line at its start.

    def start(self, step: int) -> None:
        """Registers the step the run starts from, on every process, before its first step.

        A signal (or, with several processes, a notice) that came while the run was being
        built stops it here, before its first step.
        """
        self.stop_after(step)

    def before_training(self, resume_step: int | None, checkpoint_dir: Any) -> str:
        """The line of a run stopped before its first step: nothing trained, where a rerun
        starts (`resume_step`: the checkpoint this run started from, None for step 0)."""
        where = (
            f"resume from checkpoint step {resume_step} in {checkpoint_dir}"
            if resume_step is not None
            else "start from step 0"
        )
        return (
            f"stopped by {self.reason} before the first step: nothing was trained yet; run "
            f"the same command to {where}."
        )

    def stop_after(self, step: int) -> bool:
        """Whether to stop after `step` (call once per dispatched step, on every process)."""
        if self.stopped_at is None and (
            self._agreed(step) if self.coordinated else self.signal is not None
        ):
            self.stopped_at = step
        return self.stopped_at is not None

    def _agreed(self, step: int) -> bool:
        if multihost_utils.reached_preemption_sync_point(step):
            self._log(f"stop requested ({self.reason}): every process stops after step {step}")
            return True
        return False
