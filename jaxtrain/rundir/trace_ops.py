"""Where a traced step's time goes, operation by operation, read from a JAX profiler trace
(`<host>.trace.json.gz`, as `train.profile_start`, `bench --profile` and `tools/bench_gpu.py
--profile` write it): `python -m jaxtrain profile PATH`.

XLA names each operation it runs in the trace: an event whose `args` carry `hlo_op`, the
instruction of the optimised program (`fusion.12`, `ynn_fusion.3`, a cuBLAS or cuDNN custom
call), and `hlo_module`, the program (`jit_train_step`). XLA:CPU records one for each thunk it
runs; on GPUs each kernel carries them from XLA's annotations, so one reading serves both.
Where a GPU runs ops as one command buffer (a CUDA graph), they share the buffer's name.

What is summed:
- only the innermost op events: a loop's or a call's own event spans the ops inside it and
  would count their time twice;
- per kind of op: the op's name without its number (`fusion`, `all-reduce-start`), and with
  the program given, whether it multiplies;
- per step: over the steps annotated in the trace (`StepTraceAnnotation`, one per step), so a
  figure reads as the step's;
- busy time: how long at least one op ran, the union of the op intervals. The sum over ops
  exceeds it where ops overlap: the CPU's threads, a GPU's streams;
- per op, the share of its time it ran alone, with no other op beside it. XLA:CPU runs
  independent ops side by side on the same cores, so a product that ran beside another reads
  slower than it is (its rate is of the time it had); on a GPU, a collective that never ran
  alone was hidden behind compute.

Given what the traced program's optimised HLO (`Compiled.as_text()`) says of its ops
(`Program`), the ops get their result types, and those that are or fuse a product (a `dot`,
a BLAS library call on GPUs: `planning/hlo_flops.py`) their FLOP rate: which products run
below the device's rate. Attention handed to cuDNN gets none.
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.rundir.profile import PROFILE_DIR, PROGRAM_FILE, TRACE_SUFFIX

_NUMBERED = re.compile(r"\.\d+$")  # `fusion.12` -> kind `fusion`


@dataclasses.dataclass(frozen=True)
class OpEvent:
    """One run of one XLA operation: where it ran (`pid`, `tid`) and when, in microseconds."""

    module: str
    op: str
    lane: tuple[Any, Any]
    start_us: float
    dur_us: float

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclasses.dataclass(frozen=True)
class Program:
    """What the traced program's optimised HLO says of its ops (`commands/profile.py` reads
    it): {op name: FLOPs of one run} for the ops that are or fuse a dot, {op name: result
    type} for the rest of the table."""

    module: str
    flops: Mapping[str, float]
    results: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class OpRow:
    """One operation's (or kind's) share of the traced steps."""

    module: str
    name: str
    runs_per_step: float
    ms_per_step: float
    share: float  # of the op time of all modules
    alone: float  # the share of its own time no other op ran
    flops_per_step: float = 0.0  # of its dots, where the program was given
    result: str = ""  # the op's result type, where the program was given

    @property
    def tflops_per_s(self) -> float:
        return self.flops_per_step / self.ms_per_step / 1e9 if self.ms_per_step else 0.0


@dataclasses.dataclass(frozen=True)
class TraceSummary:
    """The op time of a trace's steps, per op and per kind of op."""

    path: Path
    steps: int
    op_ms_per_step: float
    busy_ms_per_step: float
    ops: list[OpRow]
    kinds: list[OpRow]


def find_trace(path: str | Path) -> Path:
    """`path` itself if it is a trace file, else the newest trace file under the folder (a run
    directory, a `--profile` folder, one session's folder)."""
    path = Path(path)
    if path.is_file():
        if not path.name.endswith(TRACE_SUFFIX):
            raise ConfigError(f"{path} is not a profiler trace (a *{TRACE_SUFFIX} file)")
        return path
    if not path.is_dir():
        raise ConfigError(f"{path} does not exist: give a *{TRACE_SUFFIX} file or a folder")
    found = sorted(path.rglob(f"*{TRACE_SUFFIX}"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise ConfigError(
            f"no *{TRACE_SUFFIX} file under {path}: trace steps with train.profile_start, "
            "`jaxtrain bench --profile DIR` or `tools/bench_gpu.py --profile DIR` first"
        )
    return found[-1]


def saved_program(path: str | Path) -> str:
    """The optimised HLO saved beside the traces of the folder `path` (a `bench --profile`
    folder, a run directory's `profile/`, or the run directory), or ""."""
    for folder in (Path(path), Path(path) / PROFILE_DIR):
        if (folder / PROGRAM_FILE).is_file():
            return (folder / PROGRAM_FILE).read_text()
    return ""


def read_events(path: Path) -> list[dict[str, Any]]:
    """The trace's events (Chrome's trace event format, gzipped)."""
    try:
        with gzip.open(path, "rt") as f:
            return json.load(f)["traceEvents"]
    except (OSError, EOFError, ValueError, KeyError) as error:
        raise ConfigError(f"{path} is not a readable profiler trace: {error}") from error


def op_events(events: Iterable[dict[str, Any]]) -> list[OpEvent]:
    """The complete events that name an XLA operation."""
    found = []
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") == "X" and "hlo_op" in args and "dur" in e:
            lane = (e.get("pid"), e.get("tid"))
            module = str(args.get("hlo_module", ""))
            found.append(
                OpEvent(module, str(args["hlo_op"]), lane, float(e["ts"]), float(e["dur"]))
            )
    return found


def innermost(ops: Sequence[OpEvent]) -> list[OpEvent]:
    """The events no other op event of their lane starts inside."""
    by_lane: dict[tuple, list[OpEvent]] = collections.defaultdict(list)
    for op in ops:
        by_lane[op.lane].append(op)
    leaves = []
    for lane_ops in by_lane.values():
        lane_ops.sort(key=lambda o: (o.start_us, -o.dur_us))
        open_ops: list[tuple[OpEvent, bool]] = []  # (event, holds another)
        for op in lane_ops:
            while open_ops and open_ops[-1][0].end_us <= op.start_us:
                event, holds = open_ops.pop()
                if not holds:
                    leaves.append(event)
            if open_ops:
                open_ops[-1] = (open_ops[-1][0], True)
            open_ops.append((op, False))
        leaves += [event for event, holds in open_ops if not holds]
    return leaves


def busy_us(ops: Iterable[OpEvent]) -> float:
    """The time at least one of `ops` ran: the length of the union of their intervals."""
    total, end = 0.0, float("-inf")
    for op in sorted(ops, key=lambda o: o.start_us):
        if op.end_us > end:
            total += op.end_us - max(op.start_us, end)
            end = op.end_us
    return total


def alone_us(ops: Sequence[OpEvent]) -> list[float]:
    """For each of `ops`, the time it ran with no other of them running (on any lane)."""
    points = sorted(
        [(op.start_us, 1, i) for i, op in enumerate(ops)]
        + [(op.end_us, 0, i) for i, op in enumerate(ops)]
    )  # ops that only touch share no time: the segment between them is empty
    alone, running, last = [0.0] * len(ops), set(), 0.0
    for time, starts, i in points:
        if len(running) == 1:
            alone[next(iter(running))] += time - last
        if starts:
            running.add(i)
        else:
            running.discard(i)
        last = time
    return alone


def annotated_steps(events: Iterable[dict[str, Any]]) -> int:
    """How many distinct steps the trace annotates (`StepTraceAnnotation`'s `step_num`; a
    step shown on more than one line, the host's and a device's, counts once)."""
    return len({
        e["args"]["step_num"]
        for e in events
        if e.get("ph") == "X" and "step_num" in (e.get("args") or {})
    })  # fmt: skip


def summarise(path: str | Path, program: Program | None = None) -> TraceSummary:
    """The per-op summary of the trace at `path` (a file, or the newest under a folder); with
    the traced `program`, its products' rates and its ops' result types."""
    trace = find_trace(path)
    events = read_events(trace)
    ops = innermost(op_events(events))
    if not ops:
        raise ConfigError(
            f"{trace} names no XLA operation (no event with an `hlo_op`): it traced no "
            "step that ran, or was cut at the trace viewer's limit of a million events (a "
            "Python trace fills it: leave train.profile_python off)"
        )
    steps = max(annotated_steps(events), 1)
    program = program or Program("", {}, {})
    total_us = sum(op.dur_us for op in ops)
    op_alone_us = alone_us(ops)

    def rows(key, results: Mapping[str, str]) -> list[OpRow]:
        runs, time_us, solo_us = collections.Counter(), collections.Counter(), collections.Counter()
        op_flops = collections.Counter()
        for op, alone in zip(ops, op_alone_us, strict=True):
            runs[key(op)] += 1
            time_us[key(op)] += op.dur_us
            solo_us[key(op)] += alone
            if op.module == program.module:
                op_flops[key(op)] += program.flops.get(op.op, 0.0)
        return [
            OpRow(k[0], k[1], runs[k] / steps, t / steps / 1e3, t / total_us,
                  solo_us[k] / t if t else 1.0, op_flops[k] / steps,
                  results.get(k[1], "") if k[0] == program.module else "")
            for k, t in time_us.most_common()
        ]  # fmt: skip

    return TraceSummary(
        path=trace,
        steps=steps,
        op_ms_per_step=total_us / steps / 1e3,
        busy_ms_per_step=busy_us(ops) / steps / 1e3,
        ops=rows(lambda op: (op.module, op.op), program.results),
        kinds=rows(lambda op: (op.module, _kind(op, program)), {}),
    )


def format_summary(summary: TraceSummary, top: int = 20) -> str:
    """The summary as text: the totals, then the kinds and the `top` ops by time."""
    s = summary
    lines = [
        f"{s.path}: {s.steps} step(s); per step {s.op_ms_per_step:,.2f} ms of op time, "
        f"{s.busy_ms_per_step:,.2f} ms with at least one op running",
    ]
    lines.append("(alone: the share of an op's time with no other op running beside it)")
    for title, rows in (("kind of op", s.kinds), ("op", s.ops)):
        lines += ["", f"{'ms/step':>10} {'share':>6} {'alone':>6} {'runs/step':>9} "
                      f"{'TFLOP/s':>8}  {title}"]  # fmt: skip
        lines += [_row(r.ms_per_step, r.share, r.alone, f"{r.runs_per_step:.1f}", r.tflops_per_s,
                       " ".join(filter(None, (r.name, r.result, f"({r.module})"))))
                  for r in rows[:top]]  # fmt: skip
        if rest := rows[top:]:
            ms = sum(r.ms_per_step for r in rest)
            rate = sum(r.flops_per_step for r in rest) / ms / 1e9
            alone = sum(r.alone * r.ms_per_step for r in rest) / ms if ms else 1.0
            lines.append(_row(ms, sum(r.share for r in rest), alone, "", rate, f"{len(rest)} more"))
    return "\n".join(lines)


def _kind(op: OpEvent, program: Program) -> str:
    """The op's name without its number, told apart by whether it multiplies (`ynn_fusion`
    runs XLA:CPU's products and its reductions alike)."""
    multiplies = op.module == program.module and program.flops.get(op.op)
    return _NUMBERED.sub("", op.op) + (" with dots" if multiplies else "")


def _row(ms: float, share: float, alone: float, runs: str, tflops_per_s: float, name: str) -> str:
    rate = f"{tflops_per_s:.3f}" if tflops_per_s else ""
    return f"{ms:>10,.3f} {share:>6.1%} {alone:>6.0%} {runs:>9} {rate:>8}  {name}"
