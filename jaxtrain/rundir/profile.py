"""A JAX profiler trace of chosen steps: `train.profile_start`, `train.profile_steps`.

The trace starts right before step `profile_start` is dispatched and stops once the last
traced step has been read (at the dispatch two steps later, the loop reading one step behind),
so every traced step ran whole inside it; each dispatch is annotated with its step number
(`StepTraceAnnotation`), which TensorBoard's profile plugin, XProf and Perfetto show as steps.
The files land in `<run dir>/profile/plugins/profile/<time>/` (`<host>.xplane.pb` for
TensorBoard's profile plugin and XProf, `<host>.trace.json.gz` and `perfetto_trace.json.gz`
for Perfetto and chrome://tracing); each process writes its own host's. Starting and stopping
a trace is host work of a second or more: the logged tokens/s and MFU of the steps around
it read lower.

The Python tracer is off unless `train.profile_python` is set: it records every call of the
host loop, a million events in two steps of a small model, and the trace viewer's files keep
the first million events, so XLA's own operations fell out of them.

Beside the traces, `program.hlo.txt` holds the traced program's optimised HLO (written by the
primary process when the trace starts), from which `python -m jaxtrain profile` reads the
FLOPs of each product (`rundir/trace_ops.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import jax

PROFILE_DIR = "profile"
PROGRAM_FILE = "program.hlo.txt"
TRACE_SUFFIX = ".trace.json.gz"  # the trace viewer's file, which `jaxtrain profile` reads


def trace_options(python: bool = False) -> jax.profiler.ProfileOptions:
    """The profiler's options: the Python tracer on only when asked for."""
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 1 if python else 0
    return options


class StepProfiler:
    """Starts, annotates and stops the trace around the dispatch of each step."""

    def __init__(
        self,
        run_dir: Path,
        start: int,
        steps: int,
        python: bool = False,
        program: Callable[[], str] | None = None,
    ):
        self.dir = Path(run_dir) / PROFILE_DIR
        self.start, self.last = start, start + steps - 1  # start 0: no trace
        self.python = python
        self.program = program  # the traced program's optimised HLO (None: not written)
        self.active = False

    @contextlib.contextmanager
    def step(self, step_no: int) -> Iterator[None]:
        """Wraps the dispatch of step `step_no`."""
        if self.active and step_no > self.last + 1:  # the last traced step has been read
            self.stop()
        if self.start and step_no == self.start:
            self.dir.mkdir(parents=True, exist_ok=True)
            if self.program is not None:
                (self.dir / PROGRAM_FILE).write_text(self.program())
            jax.profiler.start_trace(
                str(self.dir),
                create_perfetto_trace=True,
                profiler_options=trace_options(self.python),
            )
            self.active = True
        if not self.active or step_no > self.last:  # the step after the last: not annotated
            yield
            return
        with jax.profiler.StepTraceAnnotation("train", step_num=step_no):
            yield

    def stop(self) -> None:
        """Ends the trace, if one is running (also at the end of a run that stops early)."""
        if self.active:
            self.active = False
            jax.profiler.stop_trace()


def list_traces(run_dir: Path) -> list[Path]:
    """The trace files of a run directory (XProf's .xplane.pb, Perfetto's .trace.json.gz)."""
    folder = Path(run_dir) / PROFILE_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.name.endswith((".xplane.pb", TRACE_SUFFIX)))
