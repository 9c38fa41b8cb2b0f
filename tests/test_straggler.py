"""A host that holds a multi-host run back is named while the run trains.

The judgement on figures first (device rate, data wait, patience, recovery), then two real
processes train with one of them sharing its CPU with busy processes: that one, and only it, is
named in the log, and every check's figures are in metrics.jsonl.
"""

from __future__ import annotations

import json

import pytest
from conftest import REPO
from multiprocess_helpers import Job, busy_cpu, pinned

from jaxtrain.train.straggler_watch import HostFigures, StragglerWatch, behind_hosts


def figures(*rates: float, waits: tuple[float, ...] = (), step_s: float = 1.0):
    waits = waits or (0.0,) * len(rates)
    return [
        HostFigures(i, f"node{i}", rate, wait, step_s)
        for i, (rate, wait) in enumerate(zip(rates, waits, strict=True))
    ]


def test_a_slow_device_and_a_long_data_wait_put_a_host_behind():
    behind = behind_hosts(
        figures(1000.0, 990.0, 600.0, 1000.0, waits=(0.01, 0.4, 0.01, 0.02)), 0.75
    )
    assert [(b.process, len(b.reasons)) for b in behind] == [(1, 1), (2, 1)]
    assert "data wait 0.4 s per step of 1 s" in behind[0].reasons[0]
    assert "device 600 GFLOP/s, 60% of the fastest host's" in behind[1].reasons[0]


def test_equal_hosts_and_small_differences_are_not_behind():
    assert behind_hosts(figures(1000.0, 800.0, waits=(0.0, 0.2)), 0.75) == []
    # The first check has no step time: data waits are not weighed.
    assert behind_hosts(figures(1000.0, 1000.0, waits=(0.0, 5.0), step_s=0.0), 0.75) == []


def test_a_host_is_named_after_patience_checks_in_a_row_and_again_when_back(monkeypatch):
    lines: list[str] = []
    monkeypatch.setattr("jax.process_count", lambda: 2)
    watch = StragglerWatch(every=10, patience=3, fraction=0.75, log=lines.append)
    slow, fine = figures(1000.0, 300.0), figures(1000.0, 990.0)
    for step, figs in [(10, slow), (20, slow), (30, fine), (40, slow), (50, slow)]:
        watch.judge(step, figs)
    assert lines == []  # the streak broke at step 30
    watch.judge(60, slow)
    assert len(lines) == 1
    assert lines[0].startswith(
        "straggler: process 1 (node1) has been behind the other processes at 3 checks in a "
        "row (steps 40-60): device 300 GFLOP/s, 30% of the fastest host's."
    )
    watch.judge(70, slow)
    assert len(lines) == 1  # named once
    watch.judge(80, fine)
    assert lines[1] == "straggler: process 1 (node1) is back in line at step 80"


def test_a_single_process_never_checks():
    assert not StragglerWatch(every=10, patience=3, fraction=0.75, log=print).due(10)


@pytest.mark.slow
@pinned
def test_the_process_sharing_its_cpu_is_named_while_training(tmp_path):
    run = tmp_path / "run"
    args = [
        "train",
        "--config",
        str(REPO / "configs" / "llama_debug.py"),
        f"--config.run.dir={run}",
        "--config.train.steps=12",
        "--config.train.seq_len=32",
        "--config.train.global_batch_size=4",
        "--config.train.log_every=100",
        "--config.train.straggler_every=3",
        "--config.train.straggler_patience=2",
        "--config.checkpoint.every=0",
    ]
    with busy_cpu(1, 3):
        job = Job(args, tmp_path / "logs", devices=1, cpus=[0, 1])
        codes = job.wait(timeout=500)
    out = job.log(0, tail=None)
    assert codes == [0, 0], out[-3000:]
    assert "straggler: process 1 (" in out and "behind the other processes" in out, out[-3000:]
    assert "straggler: process 0 (" not in out, out[-3000:]
    checks = [
        r
        for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if "straggler/device_ratio" in r
    ]
    assert [r["step"] for r in checks] == [3, 6, 9, 12]
    # The checks that named it: process 1 was the slowest, under the fraction of process 0.
    behind = [r for r in checks if r["straggler/behind"] > 0]
    assert len(behind) >= 2, checks
    assert all(r["straggler/slowest_process"] == 1.0 for r in behind), checks
    assert all(r["straggler/device_ratio"] < 0.75 for r in behind), checks
