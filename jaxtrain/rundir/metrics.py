"""Where metrics go: a JSONL file in the run directory (the source of truth), TensorBoard event
files when tensorboardX is installed, the console (a progress bar on a terminal, plain log
lines when output is piped to a file such as a Slurm log or CI), and Weights & Biases when
`metrics.wandb_project` names a project (`jaxtrain.rundir.wandb_sink`).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from jaxtrain.rundir.disk_full import disk_full_error, is_disk_full


def _scalar(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


class JsonlSink:
    """Appends one JSON object per record to <run dir>/metrics.jsonl.

    Each line goes to the file in one unbuffered write, so a reader never sees half a record
    from a live run; a write that fails (a full disk) is cut back to the last whole line and
    raised as DiskFullError. A line left torn by an older writer or a crash is ended on open,
    so the next record starts on a line of its own.
    """

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if _ends_torn(path):
            self._append(b"\n")

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, "time": time.time(), **{k: _scalar(v) for k, v in metrics.items()}}
        self._append((json.dumps(record) + "\n").encode())

    def _append(self, data: bytes) -> None:
        start = os.fstat(self._fd).st_size
        view = memoryview(data)
        try:
            while view:  # one write; a short one (disk nearly full) is retried to get its error
                view = view[os.write(self._fd, view) :]
        except OSError as e:
            try:
                os.ftruncate(self._fd, start)  # no torn record for readers or the next append
            except OSError:
                pass
            if is_disk_full(e):
                raise disk_full_error(self.path.parent, f"writing {self.path.name}") from e
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _ends_torn(path: Path) -> bool:
    """Whether a file ends in a line without its newline."""
    with path.open("rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


class TensorBoardSink:
    """TensorBoard scalars, one tag per metric, under <run dir>/tensorboard.

    tensorboardX writes events from a thread of its own: a failed write ends that thread, after
    which its queue would fill and block training. A dead writer thread is therefore checked for
    before each record: on a full disk it is reported as DiskFullError, otherwise TensorBoard
    output stops with a warning (metrics.jsonl still holds every record).
    """

    def __init__(self, path: Path):
        from tensorboardX import SummaryWriter

        self.path = path
        self._writer = SummaryWriter(str(path))
        self._stopped = False

    def _writer_thread_alive(self) -> bool:
        events = getattr(getattr(self._writer, "file_writer", None), "event_writer", None)
        worker = getattr(events, "_worker", None)
        return worker is None or worker.is_alive()

    def _check_writer(self) -> None:
        if self._writer_thread_alive():
            return
        self._stopped = True
        if _disk_is_full(self.path):
            raise disk_full_error(self.path, "writing TensorBoard events")
        print(
            f"warning: the TensorBoard writer for {self.path} stopped (see the error above); "
            "no more TensorBoard events, metrics.jsonl still records everything",
            file=sys.stderr,
            flush=True,
        )

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        if self._stopped:
            return
        self._check_writer()
        if self._stopped:
            return
        try:
            for key, value in metrics.items():
                value = _scalar(value)
                if isinstance(value, float) and math.isfinite(value):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()
        except OSError as e:
            if is_disk_full(e):
                self._stopped = True
                raise disk_full_error(self.path, "writing TensorBoard events") from e
            raise

    def close(self) -> None:
        if not self._stopped and self._writer_thread_alive():
            self._writer.close()


def _disk_is_full(path: Path) -> bool:
    """Whether the filesystem holding `path` has (almost) no space left for this user."""
    try:
        stats = os.statvfs(path if path.exists() else path.parent)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < 1 << 20


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
    """tqdm's progress bar on a terminal, the latest metrics beside it and each validation record
    kept as a line above it; one plain log line per record otherwise (Slurm logs, CI, a pipe)."""

    SHOWN = ("loss", "val_loss", "val_ppl", "lr", "grad_norm", "tokens_per_s", "mfu")

    def __init__(self, total_steps: int, stream: TextIO | None = None, progress: bool = True):
        self.total = total_steps
        self.stream = stream or sys.stdout
        self.bar = progress and self.stream.isatty()
        self._tqdm: tqdm | None = None  # opened at the first record: a resumed run starts there
        self._start: tuple[float, int] | None = None

    def _eta(self, step: int) -> str:
        now = time.time()
        if self._start is None:
            self._start = (now, step)
            return "?"
        t0, s0 = self._start
        if step <= s0:
            return "?"
        return tqdm.format_interval((now - t0) / (step - s0) * (self.total - step))

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        shown = " ".join(_format(k, metrics[k]) for k in self.SHOWN if k in metrics)
        line = f"step {step}/{self.total} {shown}"
        if not self.bar:
            self.stream.write(f"{line} eta {self._eta(step)}\n")
            self.stream.flush()
            return
        if self._tqdm is None:
            self._tqdm = tqdm(
                total=self.total, initial=step, file=self.stream, unit="step", dynamic_ncols=True
            )
        if any(k.startswith("val_") for k in metrics):
            self._tqdm.write(line, file=self.stream)
        self._tqdm.set_postfix_str(shown, refresh=False)
        self._tqdm.update(step - self._tqdm.n)

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()


class MetricsWriter:
    """Fans one record out to every sink; only the first process writes.

    The files (metrics.jsonl, a TensorBoard event file) are opened at the first record, so a
    trainer that writes nothing (a rerun of a finished run) leaves the run directory as it was.
    """

    def __init__(
        self,
        run_dir: Path,
        total_steps: int,
        *,
        is_primary: bool = True,
        progress: bool = True,
        console: bool = True,
        tracker: Callable[[], Any] | None = None,
    ):
        """`tracker`: opens one more sink with the files (an experiment tracker: wandb)."""
        self.run_dir = run_dir
        self.sinks: list[Any] = []
        self._to_open = is_primary
        self._tracker = tracker
        if is_primary and console:
            self.sinks.append(ConsoleSink(total_steps, progress=progress))

    def _open_files(self) -> None:
        self._to_open = False
        self.sinks.insert(0, JsonlSink(self.run_dir / "metrics.jsonl"))
        try:
            self.sinks.insert(1, TensorBoardSink(self.run_dir / "tensorboard"))
        except ImportError:
            pass  # TensorBoard is optional; the JSONL file carries everything.
        except OSError as e:
            if is_disk_full(e):
                raise disk_full_error(
                    self.run_dir / "tensorboard", "creating a TensorBoard event file"
                ) from e
            raise
        if self._tracker is not None:
            self.sinks.append(self._tracker())

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        if self._to_open:
            self._open_files()
        for sink in self.sinks:
            sink.write(step, metrics)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def read_records(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(every whole record of a metrics.jsonl file, notes on the lines skipped).

    A last line without its newline is a record whose write was cut short (a full disk, a
    crash); a line that is not a JSON object elsewhere was damaged. Both are skipped, and each
    note names the file and the line number.
    """
    records, notes = [], []
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        elif number == len(lines):  # no newline after it: the write never finished
            notes.append(
                f"{path}: line {number}, the last, is an unfinished record (a write "
                "cut short by a full disk or a crash); skipped"
            )
        else:
            notes.append(f"{path}: line {number} is not a whole JSON record; skipped")
    return records, notes


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every whole record of a metrics.jsonl file (damaged lines skipped: see read_records)."""
    return read_records(path)[0]
