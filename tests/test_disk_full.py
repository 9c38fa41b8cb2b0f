"""A full disk: metric lines stay whole, readers skip a torn line and say so, and training stops
with one error line naming the full folder while earlier checkpoints stay intact."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import orbax.checkpoint as ocp
import pytest
from checkpoint_fixtures import CLI_OVERRIDES, saved_steps
from conftest import REPO

from jaxtrain.cli import main
from jaxtrain.commands.plot import load_run_metrics
from jaxtrain.commands.runs import build_report, format_report
from jaxtrain.rundir import metrics as metrics_lib
from jaxtrain.rundir.disk_full import DiskFullError, is_disk_full, quiet_writer_logs
from jaxtrain.rundir.metrics import JsonlSink, read_jsonl, read_records

ORBAX_ENOSPC = (
    'RESOURCE_EXHAUSTED: Error writing "params.x/0.0" in OCDBT database: Failed to '
    "write 29201 bytes to file 9: No space left on device [os_error_code='28']"
)


def _cli_args(run_dir: Path, **overrides) -> list[str]:
    values = {**CLI_OVERRIDES, "run.dir": run_dir, **overrides}
    return [
        "--config",
        str(REPO / "configs" / "llama_debug.py"),
        *(f"--config.{k}={v}" for k, v in values.items()),
    ]


def _write_torn(path: Path, cut_last: bool = True) -> None:
    lines = [json.dumps({"step": s, "loss": 5.0 - s / 10, "time": 100.0 + s}) for s in (1, 2, 3)]
    text = "\n".join(lines) + "\n" + lines[0][:17]
    if not cut_last:  # a torn record followed by a whole one (an older writer's append)
        text += lines[2].replace('"step": 3', '"step": 4') + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_disk_full_is_recognised_in_an_exception_chain():
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(ValueError(ORBAX_ENOSPC))
    try:
        try:
            raise OSError(errno.ENOSPC, "full")
        except OSError as inner:
            raise RuntimeError("save failed") from inner
    except RuntimeError as outer:
        assert is_disk_full(outer)
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))


def test_writer_threads_do_not_report_a_full_disk_again(caplog):
    quiet_writer_logs()
    logging.getLogger("absl").error("_SignalingThread.run() raised an exception: %s", ORBAX_ENOSPC)
    logging.getLogger("asyncio").error(
        "Task exception was never retrieved", exc_info=(ValueError, ValueError(ORBAX_ENOSPC), None)
    )
    logging.getLogger("absl").error("another problem")
    assert [r.getMessage() for r in caplog.records] == ["another problem"]


def test_a_metric_write_that_hits_a_full_disk_leaves_only_whole_lines(tmp_path, monkeypatch):
    path = tmp_path / "run" / "metrics.jsonl"
    sink = JsonlSink(path)
    sink.write(1, {"loss": 2.5})
    real_write = os.write

    def half_then_full(fd, data):
        if len(data) > 10:
            return real_write(fd, bytes(data[: len(data) // 2]))  # a short write ...
        raise OSError(errno.ENOSPC, "No space left on device")  # ... then the disk is full

    monkeypatch.setattr(metrics_lib.os, "write", half_then_full)
    with pytest.raises(DiskFullError) as info:
        sink.write(2, {"loss": 2.4})
    assert str(info.value).startswith(
        f"no space left on device: {path.parent} is full (writing metrics.jsonl failed)."
    )
    assert "checkpoints already complete are intact" in str(info.value)
    sink.close()
    assert path.read_text().endswith("\n")
    assert read_records(path) == ([read_jsonl(path)[0]], [])
    assert [r["step"] for r in read_jsonl(path)] == [1]


def test_readers_skip_a_torn_last_line_and_report_it(tmp_path, capsys):
    run_dir = tmp_path / "run"
    _write_torn(run_dir / "metrics.jsonl")
    records, notes = read_records(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    assert notes == [
        f"{run_dir / 'metrics.jsonl'}: line 4, the last, is an unfinished record "
        "(a write cut short by a full disk or a crash); skipped"
    ]
    report = build_report(run_dir)
    assert report.step == 3 and report.metrics_notes == notes
    assert main(["runs", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "step 3" in out and "line 4, the last, is an unfinished record" in out
    assert [r["step"] for r in load_run_metrics(run_dir).records] == [1, 2, 3]
    assert "line 4, the last, is an unfinished record" in capsys.readouterr().err


def test_a_torn_line_inside_the_file_is_reported_with_its_number(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _write_torn(path, cut_last=False)
    records, notes = read_records(path)
    assert [r["step"] for r in records] == [1, 2, 3]  # the glued line 4 is lost, said so
    assert notes == [f"{path}: line 4 is not a whole JSON record; skipped"]
    assert "line 4" in format_report(build_report(tmp_path))


def test_a_writer_ends_a_torn_line_before_appending(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _write_torn(path)
    sink = JsonlSink(path)
    sink.write(4, {"loss": 4.6})
    sink.close()
    records, notes = read_records(path)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert notes == [f"{path}: line 4 is not a whole JSON record; skipped"]


def _fail_the_save_of(step_to_fail: int, monkeypatch) -> None:
    real_save = ocp.CheckpointManager.save

    def save(self, step, *args, **kwargs):
        if step == step_to_fail:
            raise ValueError(ORBAX_ENOSPC)
        return real_save(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", save)


def test_a_full_disk_during_a_save_stops_training_with_one_line(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    _fail_the_save_of(4, monkeypatch)
    assert main(_cli_args(run_dir)) == 2
    captured = capsys.readouterr()
    ckpt = run_dir / "checkpoints"
    assert captured.err == (
        f"jaxtrain train: error: no space left on device: {ckpt} is full (writing a checkpoint "
        "failed). Nothing already written is lost: the checkpoints already complete there "
        "(latest: step 2) are intact, and an unfinished checkpoint is skipped on resume. Free "
        "space there (or point run.dir / checkpoint.dir at a larger disk), then run the same "
        "command to resume.\n"
    )
    assert saved_steps(run_dir) == [2]


def test_a_full_disk_writing_metrics_stops_training_with_one_line(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    real_write = os.write

    def full_after_three_lines(fd, data):
        if os.fstat(fd).st_size and bytes(data).count(b'"step": 4,'):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(metrics_lib.os, "write", full_after_three_lines)
    assert main(_cli_args(run_dir)) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"jaxtrain train: error: no space left on device: {run_dir} is full "
        "(writing metrics.jsonl failed)."
    )
    assert err.count("\n") == 1
    records, notes = read_records(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3] and notes == []


@pytest.fixture
def tiny_disk(tmp_path):
    """A 3 MB tmpfs (needs mount rights: root, outside a restricted container)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if result.returncode:
        pytest.skip(
            f"cannot mount a small tmpfs here ({result.stderr.strip() or 'mount failed'}"
            "); the monkeypatched tests above cover the same paths"
        )
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def test_a_real_full_disk_gives_one_line_and_a_readable_run(tiny_disk):
    run_dir = tiny_disk / "run"
    result = subprocess.run(
        [sys.executable, "-m", "jaxtrain", *_cli_args(run_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("jaxtrain train: error: no space left on device: ")
    assert "are intact" in result.stderr
    assert saved_steps(run_dir), "an earlier checkpoint should be complete"
    runs = subprocess.run(
        [sys.executable, "-m", "jaxtrain", "runs", str(run_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert runs.returncode == 0, runs.stderr


def _tensorboard_sink(tmp_path: Path):
    pytest.importorskip("tensorboardX")
    return metrics_lib.TensorBoardSink(tmp_path / "tensorboard")


def test_a_dead_tensorboard_writer_never_blocks_training(tmp_path, monkeypatch, capsys):
    sink = _tensorboard_sink(tmp_path)
    sink.write(1, {"loss": 2.0})
    sink._writer.file_writer.event_writer._worker.stop()  # as a failed write ends it
    for step in range(2, 40):  # more records than its queue holds: would block if queued
        sink.write(step, {"loss": 2.0, "lr": 1e-3})
    assert "the TensorBoard writer for" in capsys.readouterr().err
    sink.close()

    full = _tensorboard_sink(tmp_path / "b")
    full._writer.file_writer.event_writer._worker.stop()
    monkeypatch.setattr(metrics_lib, "_disk_is_full", lambda path: True)
    with pytest.raises(DiskFullError, match="writing TensorBoard events failed"):
        full.write(1, {"loss": 2.0})
    full.close()


def test_a_full_disk_flushing_tensorboard_is_one_error(tmp_path, monkeypatch):
    sink = _tensorboard_sink(tmp_path)

    def flush():
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sink._writer, "flush", flush)
    with pytest.raises(DiskFullError, match=f"{tmp_path / 'tensorboard'} is full"):
        sink.write(1, {"loss": 2.0})
    sink.close()
