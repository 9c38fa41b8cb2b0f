"""PNG figures comparing runs, read from their metrics.jsonl files (the source of truth).

    python -m jaxtrain plot runs/a runs/b --out plots/

One figure per quantity (loss, learning rate, gradient norm, tokens/s, MFU), one line per run
labelled by its run name; the loss figure draws training loss as lines and validation loss as
dashed lines with markers in the same colour. Figures are drawn on matplotlib `Figure` objects
with the Agg canvas, so nothing touches pyplot's global backend (a notebook keeps its own).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from jaxtrain.commands.options import check_output_folder
from jaxtrain.errors import ConfigError
from jaxtrain.rundir.metrics import read_records

# file stem -> (title, y label, [(metric key, line style), ...], log scale)
FIGURES: dict[str, tuple[str, str, list[tuple[str, str]], bool]] = {
    "loss": ("Loss", "cross-entropy (nats/token)", [("loss", "-"), ("val_loss", "--o")], False),
    "lr": ("Learning rate", "learning rate", [("lr", "-")], False),
    "grad_norm": ("Gradient norm", "global norm (before clipping)", [("grad_norm", "-")], True),
    "tokens_per_s": ("Throughput", "tokens / s", [("tokens_per_s", "-")], False),
    "mfu": ("Model FLOPs utilisation", "MFU", [("mfu", "-")], False),
    # Its keys are the harness/<task>/<metric> figures the runs logged (harness_keys).
    "harness": ("lm-evaluation-harness", "score", [], False),
}
LABELS = {"loss": "train", "val_loss": "val"}


def harness_keys(runs: list[RunMetrics]) -> list[tuple[str, str]]:
    """(key, line style) of every harness/<task>/<metric> figure the runs logged, without
    their stderr and the evaluation's time."""
    keys = {
        key
        for run in runs
        for record in run.records
        for key in record
        if key.count("/") == 2 and key.startswith("harness/") and not key.endswith("_stderr")
    }
    return [(key, "-o") for key in sorted(keys)]


@dataclasses.dataclass
class RunMetrics:
    """The metric records of one run, one per step (the latest record wins)."""

    name: str
    path: Path
    records: list[dict[str, Any]]

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one metric, in step order, over the records that hold it."""
        points = [(r["step"], r[key]) for r in self.records if isinstance(r.get(key), (int, float))]
        return [s for s, _ in points], [float(v) for _, v in points]


def _run_name(run_dir: Path) -> str:
    """The run's `run.name` from its saved config, else the folder's name."""
    from jaxtrain.config.loader import read_saved_config

    try:
        return read_saved_config(run_dir).get("run", {}).get("name") or run_dir.name
    except (FileNotFoundError, ConfigError):
        return run_dir.name


def metrics_file(run_dir: str | Path) -> Path:
    """<run_dir>/metrics.jsonl (or a metrics file itself); FileNotFoundError naming a missing one."""
    path = Path(run_dir)
    file = path if path.is_file() else path / "metrics.jsonl"
    if not file.is_file():
        raise FileNotFoundError(
            f"{file} does not exist: {run_dir} is not a run directory with "
            "metrics (train first, or check the path)."
        )
    return file


def load_run_metrics(run_dir: str | Path) -> RunMetrics:
    """Reads <run_dir>/metrics.jsonl (or a metrics file itself).

    A resumed run repeats the steps after its last checkpoint; records of the same step are
    merged, later values replacing earlier ones, so each step is drawn once.
    """
    file = metrics_file(run_dir)
    by_step: dict[int, dict[str, Any]] = {}
    records, notes = read_records(file)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    for record in records:
        step = int(record.get("step", 0))
        by_step.setdefault(step, {}).update(record)
    run_dir = file.parent
    return RunMetrics(_run_name(run_dir), run_dir, [by_step[s] for s in sorted(by_step)])


def _unique_names(runs: list[RunMetrics]) -> list[str]:
    names = [r.name for r in runs]
    return [f"{r.name} ({r.path})" if names.count(r.name) > 1 else r.name for r in runs]


def figure(runs: list[RunMetrics], stem: str) -> Any | None:
    """The matplotlib Figure for one entry of FIGURES, or None when no run has that metric."""
    from matplotlib.figure import Figure

    title, ylabel, keys, log = FIGURES[stem]
    keys = harness_keys(runs) if stem == "harness" else keys
    if not any(r.series(k)[0] for r in runs for k, _ in keys):
        return None
    fig = Figure(figsize=(7, 4), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    colors = [f"C{i % 10}" for i in range(len(runs))]
    for index, (run, name, color) in enumerate(zip(runs, _unique_names(runs), colors)):
        for number, (key, style) in enumerate(keys):
            steps, values = run.series(key)
            if not steps:
                continue
            if stem == "harness":  # many tasks and metrics: a colour for each line
                color = f"C{(index * len(keys) + number) % 10}"
            label = LABELS.get(key, key.removeprefix("harness/"))
            label = f"{name} {label}" if len(keys) > 1 else name
            marker = "o" if style.endswith("o") else None
            ax.plot(
                steps,
                values,
                style.rstrip("o"),
                color=color,
                marker=marker,
                markersize=4,
                linewidth=1.5,
                label=label,
            )
    ax.set(
        title=f"{title}: {runs[0].name}" if len(runs) == 1 else title, xlabel="step", ylabel=ylabel
    )
    if log:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def save_png(fig: Any, path: Path) -> Path:
    """Renders a Figure to a PNG file with the Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig).print_png(str(path))
    return path


def default_out_dir(run_dirs: list[str | Path]) -> Path:
    """<run>/plots for one run; plots/ in the working directory when comparing several."""
    return Path(run_dirs[0]) / "plots" if len(run_dirs) == 1 else Path("plots")


def plot_runs(
    run_dirs: list[str | Path],
    out_dir: str | Path | None = None,
    stems: tuple[str, ...] = tuple(FIGURES),
) -> list[Path]:
    """Writes one PNG per quantity that any run logged; returns the files written."""
    runs = [load_run_metrics(d) for d in run_dirs]
    out = Path(out_dir) if out_dir else default_out_dir(list(run_dirs))
    written = []
    for stem in stems:
        fig = figure(runs, stem)
        if fig is not None:
            written.append(save_png(fig, out / f"{stem}.png"))
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `plot`: the runs, the output folder and which figures."""
    parser.add_argument("runs", nargs="+", help="run directories (holding metrics.jsonl)")
    parser.add_argument(
        "--out",
        default=None,
        help="folder for the PNGs (default: RUN/plots, or plots/ for several)",
    )
    parser.add_argument(
        "--only", nargs="+", choices=sorted(FIGURES), default=None, help="draw only these figures"
    )


def handle(args: argparse.Namespace) -> int:
    """Writes the figures and prints their paths; returns the exit status."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError(
            "plot needs matplotlib: pip install 'jaxtrain[plot]' (or "
            "pip install -e '.[plot]' in a clone)."
        ) from None
    for run in args.runs:  # a missing run is named first
        metrics_file(run)
    out = Path(args.out) if args.out else default_out_dir(args.runs)
    check_output_folder(out, "--out" if args.out else "plots folder")
    files = plot_runs(args.runs, out, tuple(args.only or FIGURES))
    for f in files:
        print(f)
    if not files:
        print("no metrics to plot yet", flush=True)
    return 0
