"""What a run is doing, at a glance: `python -m jaxtrain runs RUN_DIR [RUN_DIR ...]`.

For each run: the config in one line (model preset, parameters, sequence length, batch, learning
rate, mesh), its progress, the latest metrics, the checkpoints on disk, when it last wrote a
metric, the ETA from its recent step rate, its goodput and badput (`jaxtrain.rundir.goodput`)
and the profiler traces it captured. Only small files are read (config.json, metrics.jsonl,
events.jsonl, checkpoint metadata), so it is safe to run next to a live training job.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.rundir import goodput as goodput_lib
from jaxtrain.rundir.metrics import read_records
from jaxtrain.rundir.profile import list_traces

# Step rate from the last few logged steps: recent enough to follow a change of speed, long
# enough to smooth the jitter of one logging interval.
RATE_WINDOW = 5


@dataclasses.dataclass
class RunReport:
    """The facts `runs` prints about one run directory."""

    path: Path
    name: str
    config: dict[str, Any]
    total_steps: int | None
    latest: dict[str, Any]  # newest values of step, loss, tokens_per_s, mfu, ...
    val_step: int | None  # step of the newest val_loss
    checkpoints: list[int]
    checkpoint_note: str  # unfinished saves, or why the folder could not be read; "" if neither
    last_update: float | None  # unix time of the newest metric record
    steps_per_s: float | None
    metrics_notes: list[str] = dataclasses.field(default_factory=list)  # lines skipped
    harness: str = ""  # the newest lm-evaluation-harness figures (harness_line)
    goodput: goodput_lib.Goodput | None = None  # None before the first start that trained
    traces: list[Path] = dataclasses.field(default_factory=list)  # profiler trace files

    @property
    def step(self) -> int:
        """The newest logged step (0 before the first metric line)."""
        return int(self.latest.get("step", 0))

    @property
    def finished(self) -> bool:
        """Whether the run has reached train.steps."""
        return self.total_steps is not None and self.step >= self.total_steps

    def eta_seconds(self) -> float | None:
        """Seconds to train.steps at the recent step rate; None when it cannot be told."""
        if self.finished or not self.steps_per_s or self.total_steps is None:
            return None
        return (self.total_steps - self.step) / self.steps_per_s


def _load_config(run_dir: Path) -> dict[str, Any]:
    """The run's saved config as a dict; {} when there is none yet or it cannot be read (the
    report then says less, and still shows the metrics and checkpoints)."""
    from jaxtrain.config.loader import read_saved_config

    try:
        return read_saved_config(run_dir).to_dict()
    except (FileNotFoundError, ConfigError):
        return {}


def _num_params(model: dict[str, Any]) -> int | None:
    from jaxtrain.models.spec.hyperparameters import ModelSpec

    try:
        return ModelSpec.from_config(model).num_params()
    except Exception:  # an older or hand-edited config: leave the count out, show the rest
        return None


def _count(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def config_line(cfg: dict[str, Any]) -> str:
    """Model preset, parameters, seq_len, batch and learning rate in one line."""
    if not cfg:
        return "no config.json"
    model, train, optim = cfg.get("model", {}), cfg.get("train", {}), cfg.get("optim", {})
    params = _num_params(model)
    parts = [
        f"{model.get('preset', '?')} ({model.get('family', '?')}"
        + (f", {_count(params)} params)" if params else ")"),
        f"seq_len {train.get('seq_len', '?')}",
    ]
    batch, micro = train.get("global_batch_size"), train.get("micro_batch_size")
    parts.append(f"batch {batch}" + (f" (micro {micro})" if micro and micro != batch else ""))
    if optim:
        parts.append(
            f"lr {optim.get('lr', 0):g} {optim.get('schedule', '')} "
            f"warmup {optim.get('warmup_steps', 0)}"
        )
    return ", ".join(parts)


def mesh_line(cfg: dict[str, Any]) -> str:
    """The mesh axes that are not 1, and the rule preset."""
    mesh = cfg.get("mesh", {})
    if not mesh:
        return "?"
    sides = []
    for side in ("ici", "dcn"):
        axes = [
            f"{k.split('_', 1)[1]}={v}"
            for k, v in mesh.items()
            if k.startswith(f"{side}_") and v != 1
        ]
        sides.append(f"{side} " + (" ".join(axes) if axes else "1"))
    return ", ".join(sides) + f", rules {mesh.get('rules', '?')}"


def _latest(records: list[dict[str, Any]]) -> tuple[dict[str, Any], int | None]:
    """Newest value of every key (by step, a later record of the same step winning)."""
    latest: dict[str, Any] = {}
    val_step = None
    for record in sorted(records, key=lambda r: r.get("step", 0)):  # stable: file order kept
        latest.update(record)
        if "val_loss" in record:
            val_step = record.get("step")
    return latest, val_step


def step_rate(records: list[dict[str, Any]], window: int = RATE_WINDOW) -> float | None:
    """Steps per second over the last `window` logged training steps of the current attempt.

    A restarted run appends records again from its checkpoint: only the records after the last
    time the step went backwards count, so the pause between attempts does not slow the rate.
    """
    start = 0
    for i in range(1, len(records)):
        if records[i].get("step", 0) <= records[i - 1].get("step", 0) and "loss" in records[i]:
            start = i
    timed = [(r["step"], r["time"]) for r in records[start:] if "loss" in r and "time" in r]
    timed = timed[-(window + 1) :]
    if len(timed) < 2:
        return None
    (s0, t0), (s1, t1) = timed[0], timed[-1]
    return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None


def _checkpoints(run_dir: Path) -> tuple[list[int], str]:
    from jaxtrain.checkpoint.manager import CheckpointError
    from jaxtrain.commands.checkpoints import list_checkpoints

    try:
        _, infos, unfinished = list_checkpoints(run_dir)
    except (CheckpointError, FileNotFoundError) as e:
        # No checkpoint folder yet is the normal state of a young run, not worth a note.
        return [], "" if "does not exist" in str(e) else str(e)
    except Exception as e:  # an odd folder must not hide the rest of the report
        return [], f"unreadable: {type(e).__name__}: {e}"
    note = f"{len(unfinished)} unfinished save(s) ignored" if unfinished else ""
    return [i.step for i in infos], note


def build_report(run_dir: str | Path) -> RunReport:
    """Reads one run directory into a RunReport."""
    path = Path(run_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a directory.")
    cfg = _load_config(path)
    metrics_file = path / "metrics.jsonl"
    records, notes = read_records(metrics_file) if metrics_file.is_file() else ([], [])
    latest, val_step = _latest(records)
    steps, note = _checkpoints(path)
    times = [r["time"] for r in records if "time" in r]
    total = cfg.get("train", {}).get("steps")
    return RunReport(
        path=path,
        name=cfg.get("run", {}).get("name") or path.name,
        config=cfg,
        total_steps=int(total) if total else None,
        latest=latest,
        val_step=val_step,
        checkpoints=steps,
        checkpoint_note=note,
        last_update=max(times) if times else None,
        steps_per_s=step_rate(records),
        metrics_notes=notes,
        harness=harness_line(records),
        goodput=goodput_lib.summarize(goodput_lib.read_events(path)),
        traces=list_traces(path),
    )


def duration(seconds: float) -> str:
    """1h02m, 3m05s, 12s."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours >= 48:
        return f"{hours // 24}d{hours % 24:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def metrics_line(report: RunReport) -> str:
    """loss, val_loss, tokens/s and MFU from the newest records."""
    m = report.latest
    parts = []
    if "loss" in m:
        parts.append(f"loss {m['loss']:.4f}")
    if "val_loss" in m:
        parts.append(f"val_loss {m['val_loss']:.4f} (step {report.val_step})")
    if "tokens_per_s" in m:
        parts.append(f"tokens/s {m['tokens_per_s']:,.0f}")
    if "mfu" in m:
        parts.append(f"MFU {m['mfu']:.3f}")  # a fraction, as in metrics.jsonl and the plots
    return "  ".join(parts) or "no metrics yet"


def harness_line(records: list[dict[str, Any]]) -> str:
    """The newest lm-evaluation-harness figure of each task and metric, with its step and
    stderr ("" when the run evaluated none)."""
    newest: dict[str, tuple[int, float, float | None]] = {}
    for record in sorted(records, key=lambda r: r.get("step", 0)):
        for key, value in record.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "harness" and not parts[2].endswith("_stderr"):
                stderr = record.get(f"{key}_stderr")
                newest[key] = (record.get("step", 0), float(value), stderr)
    return "  ".join(
        f"{key.split('/')[1]} {key.split('/')[2]} {value:.4f}"
        + (f" ±{stderr:.4f}" if isinstance(stderr, int | float) else "")
        + f" (step {step})"
        for key, (step, value, stderr) in newest.items()
    )


def goodput_lines(g: goodput_lib.Goodput) -> list[tuple[str, str]]:
    """The goodput row and the badput row of a report."""
    starts = f"{g.starts} start{'s' if g.starts != 1 else ''}"
    if g.crashes:
        starts += f", {g.crashes} after a crash"
    rows = [("goodput", f"{g.fraction:.1%} of {duration(g.wall)} since the first start ({starts})")]
    causes = sorted(g.badput.items(), key=lambda item: -item[1])
    parts = []
    for name, seconds in causes:
        if seconds < 0.05:
            continue
        part = f"{name} {duration_s(seconds)} ({seconds / g.wall:.1%})" if g.wall else name
        if name == "recomputed steps" and g.recomputed:
            part += " [steps " + ", ".join(f"{a}-{b}" for a, b in g.recomputed) + "]"
        parts.append(part)
    rows.append(("badput", ", ".join(parts) or "none"))
    return rows


def duration_s(seconds: float) -> str:
    """A duration with tenths below a minute (badput causes are often seconds)."""
    return f"{seconds:.1f}s" if seconds < 60 else duration(seconds)


def format_report(report: RunReport, now: float | None = None) -> str:
    """The terminal block for one run."""
    now = time.time() if now is None else now
    total = report.total_steps
    if total:
        progress = f"step {report.step}/{total} ({100 * report.step / total:.0f}%)"
    else:
        progress = f"step {report.step}"
    if report.finished:
        progress += ", finished"
    elif report.steps_per_s:
        progress += f", {report.steps_per_s:.3g} steps/s"
    eta = report.eta_seconds()
    eta_text = "-" if eta is None else duration(eta)
    updated = (
        "never" if report.last_update is None else (f"{duration(now - report.last_update)} ago")
    )
    ckpts = ", ".join(map(str, report.checkpoints)) or "none"
    if report.checkpoint_note:
        ckpts += f"  ({report.checkpoint_note})"
    rows = [
        ("config", config_line(report.config)),
        ("mesh", mesh_line(report.config)),
        ("progress", progress),
        ("metrics", metrics_line(report)),
        ("checkpoints", ckpts),
        ("updated", updated),
        ("eta", eta_text),
    ]
    if report.harness:
        rows.insert(4, ("harness", report.harness))
    if report.goodput is not None:
        rows += goodput_lines(report.goodput)
    if report.traces:
        shown = [str(t.relative_to(report.path)) for t in report.traces]
        rows.append(("traces", ", ".join(shown)))
    rows += [("warning", note) for note in report.metrics_notes]
    width = max(len(k) for k, _ in rows)
    return "\n".join(
        [f"{report.name}  [{report.path}]"] + [f"  {k.ljust(width)}  {v}" for k, v in rows]
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `runs`: the run directories."""
    parser.add_argument("runs", nargs="+", help="run directories")


def handle(args: argparse.Namespace) -> int:
    """Prints one block per run directory; returns the exit status."""
    print("\n\n".join(format_report(build_report(d)) for d in args.runs))
    return 0
