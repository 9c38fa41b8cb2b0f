"""Goodput: the events a run appends to events.jsonl, and what `runs` makes of them after a
SIGKILL and a resume: a goodput percentage, the time down, the steps computed again."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from test_checkpointing import cli_command, wait_for_step

from jaxtrain.commands import runs
from jaxtrain.rundir import goodput
from jaxtrain.rundir.metrics import read_jsonl


def test_goodput_counts_recomputed_steps_and_time_down_after_a_crash():
    events = [
        {"event": "start", "time": 0.0, "step": 0},
        {"event": "ready", "time": 10.0, "step": 0, "compile_s": 6.0},
        {"event": "steps", "time": 20.0, "first": 1, "last": 10, "wall": 10.0,
         "data_wait": 1.0, "checkpoint": 1.0, "eval": 0.0},
        {"event": "steps", "time": 30.0, "first": 11, "last": 20, "wall": 10.0,
         "data_wait": 0.0, "checkpoint": 0.0, "eval": 2.0},
        # killed here; restarted 15 s later from checkpoint 15: steps 16-20 are lost
        {"event": "start", "time": 45.0, "step": 15},
        {"event": "ready", "time": 50.0, "step": 15, "compile_s": 4.0},
        {"event": "steps", "time": 60.0, "first": 16, "last": 25, "wall": 10.0,
         "data_wait": 0.0, "checkpoint": 0.0, "eval": 0.0},
        {"event": "exit", "time": 61.0, "step": 25, "wall": 1.0,
         "data_wait": 0.0, "checkpoint": 1.0, "eval": 0.0},
    ]  # fmt: skip
    g = goodput.summarize(events)
    assert (g.wall, g.starts, g.crashes, g.recomputed) == (61.0, 2, 1, [(16, 20)])
    # Steps 1-10: 8 s; steps 11-15 of the second interval's 8 s: 4 s; steps 16-25: 10 s.
    assert g.productive == pytest.approx(22.0)
    assert g.badput == pytest.approx(
        {
            "startup": 4.0 + 1.0,
            "compile": 6.0 + 4.0,
            "data wait": 1.0,
            "checkpoints": 2.0,
            "evaluation": 2.0,
            "down after a crash": 15.0,
            "recomputed steps": 4.0,
            "other": 0.0,  # every second of this run has its cause
        }
    )
    assert g.fraction == pytest.approx(22.0 / 61.0)


def test_the_event_log_times_steps_apart_from_host_work_and_idle_time(tmp_path):
    now = [100.0]
    log = goodput.EventLog(tmp_path, clock=lambda: now[0])
    log.ready(step=0, compile_s=3.0)
    now[0] = 110.0
    log.steps_done(5)
    now[0] = 500.0  # a notebook paused between two run() calls: not step time
    log.ready(step=5, compile_s=0.0)
    now[0] = 504.0
    log.steps_done(8)
    log.exit(8)
    events = goodput.read_events(tmp_path)
    assert [e["event"] for e in events] == ["start", "ready", "steps", "steps", "exit"]
    assert [(e["first"], e["last"], e["wall"]) for e in events if e["event"] == "steps"] == [
        (1, 5, 10.0),
        (6, 8, 4.0),
    ]
    # Processes other than 0 write nothing.
    quiet = goodput.EventLog(tmp_path / "other", enabled=False)
    quiet.ready(step=0, compile_s=1.0)
    quiet.exit(3)
    assert not (tmp_path / "other").exists()


@pytest.mark.slow
def test_runs_shows_goodput_and_the_lost_work_after_sigkill_and_resume(tmp_path):
    run_dir = tmp_path / "run"
    overrides = {"train.steps": 60, "checkpoint.every": 10}
    with open(tmp_path / "killed.log", "w") as out:
        proc = subprocess.Popen(
            cli_command(run_dir, **overrides), stdout=out, stderr=subprocess.STDOUT
        )
        try:
            wait_for_step(proc, run_dir, 11)  # past the first checkpoint ...
            deadline = time.monotonic() + 60
            while not (run_dir / "checkpoints" / "10").is_dir():  # ... once it is committed
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    killed_at = max(r["step"] for r in read_jsonl(run_dir / "metrics.jsonl"))
    time.sleep(2.0)  # down for a while before the restart

    result = subprocess.run(
        cli_command(run_dir, **overrides), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    resumed = int(result.stdout.split("resumed from step ")[1].split()[0])
    assert 10 <= resumed < killed_at, "killed right at a checkpoint: no step was lost"

    g = goodput.summarize(goodput.read_events(run_dir))
    assert (g.starts, g.crashes) == (2, 1)
    assert g.badput["down after a crash"] >= 2.0
    # The steps after the checkpoint the resume went back to, up to the last one recorded
    # (the kill may fall between a step's metric line and its event).
    ((first, last),) = g.recomputed
    assert first == resumed + 1 and last in (killed_at - 1, killed_at)
    report = subprocess.run(
        [*cli_command(run_dir)[:3], "runs", str(run_dir)], capture_output=True, text=True
    ).stdout
    goodput_line = next(line for line in report.splitlines() if line.strip().startswith("goodput"))
    assert "% of " in goodput_line and "2 starts, 1 after a crash" in goodput_line
    badput_line = next(line for line in report.splitlines() if line.strip().startswith("badput"))
    assert "down after a crash" in badput_line
    assert "recomputed steps" in badput_line and "[steps 11-" in badput_line
    assert runs.build_report(run_dir).goodput.fraction > 0
