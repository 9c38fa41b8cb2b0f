"""Ending a run whose steps stopped completing, with every thread's stack and one line of cause.

A host that stops making progress (a data worker stuck on a slow file system, a collective that
never completes while every heartbeat still runs) otherwise waits forever with no output, and
so does every other host of the job, in its next collective. `HangWatch` is a daemon thread
that measures the time since the last completed step (`train.hang_timeout`); when it runs out it
prints the Python stack of every thread (`faulthandler`), then one line naming the step and what
the training loop was doing (waiting for the data pipeline, for a step on the devices, writing
a checkpoint, evaluating), tells the other processes (`distributed.abandon`, which stops them
within a beat) and exits with `EXIT_HUNG`, so that the scheduler (or the job script) can start
the job again from the last complete checkpoint.

The clock starts at the first completed step of each `Trainer.run`, so compiling, restoring and
the first step's allocations never count, and it stops when `run` returns (a notebook idling
between runs is not hung).

What the loop was doing is read from the main thread's stack, not from markers in the loop: a
stuck call cannot update a marker, but its frame is there. A process waiting for its step on the
devices (or in a dispatch, or agreeing on a checkpoint or a stop) may be waiting for another
process, so it waits `PEER_GRACE_S` longer: the process that is stuck itself (in its data or
its checkpoint) reports first, and this one then stops on its notice, naming it.

In case the watch thread itself cannot run (a native call holding the interpreter lock),
`faulthandler.dump_traceback_later` is armed as a backstop: it dumps the stacks and exits from C
`BACKSTOP_S` after the watch would have.
"""

from __future__ import annotations

import faulthandler
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import jax

from jaxtrain.parallel import distributed, peer_watch

EXIT_HUNG = 4
# Longer than the peer watch's beat (2 s) plus the time its notice takes to end a process.
PEER_GRACE_S = 10.0
BACKSTOP_S = 30.0

# The trainer's methods, innermost first wins, and what the loop is doing inside each one.
# (Names, not imports: this layer sits below the trainer.)
_PHASES = (
    ("save", "writing a checkpoint"),
    ("_check_finite", "waiting for a checkpoint to complete"),
    ("close", "waiting for a checkpoint to complete"),
    ("evaluate", "evaluating"),
    ("_save_due", "agreeing with the other processes whether to checkpoint"),
    ("stop_after", "agreeing with the other processes on the stop step"),
    ("_compare_hosts", "comparing this host's figures with the other processes'"),
    ("_after_step", "waiting for the step to complete on the devices"),
    ("_dispatch", "dispatching the next step"),
)
_DATA_FRAMES = (f"{os.sep}grain{os.sep}", f"jaxtrain{os.sep}data{os.sep}")
DATA_WAIT = "waiting for the next batch from the data pipeline"
DEVICE_WAIT = "waiting for the step to complete on the devices"
# Phases in which this process may be waiting for another one (a collective, or a dispatch
# that blocks until the devices take more work): they give a stuck peer time to report first.
_PEER_WAITS = {
    DEVICE_WAIT,
    "dispatching the next step",
    "agreeing with the other processes whether to checkpoint",
    "agreeing with the other processes on the stop step",
    "comparing this host's figures with the other processes'",
}


def _stderr():
    """Where faulthandler writes: sys.stderr, or file descriptor 2 when sys.stderr is no file
    (captured by a test runner or a notebook)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return 2
    return sys.stderr


def phase_of(frame: FrameType | None) -> str:
    """What the training loop is doing, from a stack's innermost frame (see `_PHASES`)."""
    stack = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    # stack[0] is innermost; find the innermost trainer method with a phase.
    for depth, f in enumerate(stack):
        name = f.f_code.co_name
        for method, phase in _PHASES:
            if name == method and f.f_code.co_filename.endswith("trainer.py"):
                if method == "_dispatch" and any(
                    any(part in g.f_code.co_filename for part in _DATA_FRAMES)
                    for g in stack[:depth]
                ):
                    return DATA_WAIT
                return phase
    return "outside the training loop's known steps (see the main thread's stack)"


class HangWatch:
    """Exits the process when no step completes for `timeout_s` seconds (0: never).

    Usage: `with watch: ... watch.completed(step) ...`. `checkpoint_dir`: where the run's
    checkpoints are, so the report names the step it resumes from;
    `on_hang(message)` replaces the report-and-exit (tests).
    """

    def __init__(
        self,
        timeout_s: float,
        checkpoint_dir: Path | None = None,
        *,
        on_hang: Callable[[str], None] | None = None,
        poll_s: float = 1.0,
    ):
        self.timeout_s = float(timeout_s)
        self.hint = peer_watch.ResumeHint(None if checkpoint_dir is None else Path(checkpoint_dir))
        self.on_hang = on_hang or self._exit
        self.poll_s = poll_s
        self._main = threading.main_thread()
        self._lock = threading.Lock()
        self._last: tuple[int, float] | None = None  # (step, when it completed)
        self._armed_at = -math.inf  # when the faulthandler backstop was last re-armed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> HangWatch:
        if self.timeout_s > 0:
            self._last, self._armed_at = None, -math.inf
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="jaxtrain-hang-watch")
            self._thread.daemon = True
            self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            faulthandler.cancel_dump_traceback_later()

    def completed(self, step: int) -> None:
        """Step `step` has completed: the clock restarts (and starts, at a run's first step)."""
        if self._thread is None:
            return
        now = time.monotonic()
        with self._lock:
            self._last = (step, now)
        # Re-arming starts a thread in CPython: at most once a second (BACKSTOP_S covers it).
        if now - self._armed_at >= 1.0:
            self._armed_at = now
            faulthandler.dump_traceback_later(
                self.timeout_s + PEER_GRACE_S + BACKSTOP_S, exit=True, file=_stderr()
            )

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            with self._lock:
                last = self._last
            if last is None:
                continue
            step, when = last
            idle = time.monotonic() - when
            if idle < self.timeout_s:
                continue
            phase = phase_of(sys._current_frames().get(self._main.ident))
            if phase in _PEER_WAITS and idle < self.timeout_s + PEER_GRACE_S:
                continue  # perhaps waiting for a stuck peer: let it report first
            self.on_hang(self._message(step, idle, phase))
            return

    def _message(self, step: int, idle: float, phase: str) -> str:
        where = (
            f" on process {jax.process_index()} of {jax.process_count()}"
            if jax.process_count() > 1
            else ""
        )
        return (
            f"hung: no training step completed for {idle:.0f} s after step {step}{where} "
            f"(train.hang_timeout={self.timeout_s:g}); it was {phase} (the stacks of every "
            f"thread are above). Exiting with status {EXIT_HUNG} so that the "
            f"job can be restarted. {self.hint.text()}".rstrip()
        )

    @staticmethod
    def _exit(message: str) -> None:
        sys.stdout.flush()
        os.write(2, b"\njaxtrain: hang watch: stacks of every thread:\n")
        faulthandler.dump_traceback(file=_stderr(), all_threads=True)
        os.write(2, f"\njaxtrain train: error: {message}\n".encode())
        distributed.abandon(EXIT_HUNG)  # tells the other processes and exits; returns alone
        sys.stderr.flush()
        peer_watch.end_child_processes()  # a stuck data worker must not outlive the run
        os._exit(EXIT_HUNG)
