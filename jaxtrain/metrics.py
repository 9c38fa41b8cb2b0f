"""Where metrics go: a JSONL file in the run directory (the source of truth), TensorBoard event
files when tensorboardX is installed, and the console (a progress bar on a terminal, plain log
lines when output is piped to a file such as a Slurm log or CI).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO


def _scalar(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


class JsonlSink:
    """Appends one JSON object per record to <run dir>/metrics.jsonl."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("a", encoding="utf-8")

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, "time": time.time(), **{k: _scalar(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    """TensorBoard scalars, one tag per metric, under <run dir>/tensorboard."""

    def __init__(self, path: Path):
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(str(path))

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        for key, value in metrics.items():
            value = _scalar(value)
            if isinstance(value, float) and math.isfinite(value):
                self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _format(key: str, value: Any) -> str:
    value = _scalar(value)
    if not isinstance(value, float):
        return f"{key}={value}"
    if key in ("lr",) or (value and abs(value) < 1e-3):
        return f"{key}={value:.3e}"
    if abs(value) >= 1000:
        return f"{key}={value:,.0f}"
    return f"{key}={value:.4f}"


class ConsoleSink:
    """A one-line progress bar with ETA on a terminal; one log line per record otherwise."""

    SHOWN = ("loss", "val_loss", "val_ppl", "lr", "grad_norm", "tokens_per_s", "mfu")

    def __init__(self, total_steps: int, stream: TextIO | None = None,
                 progress: bool = True):
        self.total = total_steps
        self.stream = stream or sys.stdout
        self.bar = progress and self.stream.isatty()
        self._start: tuple[float, int] | None = None

    def _eta(self, step: int) -> str:
        now = time.time()
        if self._start is None:
            self._start = (now, step)
            return "?"
        t0, s0 = self._start
        if step <= s0:
            return "?"
        remaining = (now - t0) / (step - s0) * (self.total - step)
        return time.strftime("%H:%M:%S", time.gmtime(remaining))

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        parts = [_format(k, metrics[k]) for k in self.SHOWN if k in metrics]
        eta = self._eta(step)
        if self.bar:
            done = int(30 * step / max(self.total, 1))
            bar = "#" * done + "." * (30 - done)
            self.stream.write(f"\r[{bar}] {step}/{self.total} {' '.join(parts)} eta {eta}\033[K")
            if step >= self.total or any(k.startswith("val_") for k in metrics):
                self.stream.write("\n")
        else:
            self.stream.write(f"step {step}/{self.total} {' '.join(parts)} eta {eta}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.bar:
            self.stream.write("\n")


class MetricsWriter:
    """Fans one record out to every sink; only the first process writes."""

    def __init__(self, run_dir: Path, total_steps: int, *, is_primary: bool = True,
                 progress: bool = True, console: bool = True):
        self.sinks: list[Any] = []
        if not is_primary:
            return
        self.sinks.append(JsonlSink(run_dir / "metrics.jsonl"))
        try:
            self.sinks.append(TensorBoardSink(run_dir / "tensorboard"))
        except ImportError:
            pass  # TensorBoard is optional; the JSONL file carries everything.
        if console:
            self.sinks.append(ConsoleSink(total_steps, progress=progress))

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        for sink in self.sinks:
            sink.write(step, metrics)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every record of a metrics.jsonl file."""
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
