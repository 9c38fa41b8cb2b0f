"""`python -m jaxtrain preflight`: one table of every host, and the host that fails or is slow.

Two real processes run the command as a launcher would; then one of them shares its CPU with
busy processes and must be named slow.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO
from multiprocess_helpers import Job, busy_cpu, pinned

from jaxtrain.planning.preflight import HostCheck, judge, table


def checks(*matmul: float) -> list[HostCheck]:
    """Host checks of equal hosts but for their matmul rates."""
    return [
        HostCheck(i, f"node{i}", 8, "MI300X", 10.0, 180.0, m, 50.0, 40.0, 900.0, "synthetic")
        for i, m in enumerate(matmul)
    ]


def test_a_host_far_slower_than_the_others_is_named():
    judged = judge(checks(1000.0, 980.0, 300.0, 1010.0))
    assert [bool(c.problems) for c in judged] == [False, False, True, False]
    text = table(judged)
    assert "process 2 (node2): slow: matmul 300 GFLOP/s, 30% of the fastest host's" in text
    header, *rows = text.splitlines()[:5]
    assert "all-reduce GB/s" in header and [r.split()[-1] for r in rows] == [
        "ok",
        "ok",
        "FAIL",
        "ok",
    ]


def test_another_device_kind_and_a_failed_write_are_named():
    hosts = checks(1000.0, 1000.0)
    hosts[1].kind = "MI250X"
    hosts[1].ckpt_mbps = None
    hosts[1].problems.append("checkpoint folder /ckpt is not writable here (Read-only file system)")
    text = table(judge(hosts))
    assert "process 1 (node1): devices: MI250X, process 0 has MI300X" in text
    assert "process 1 (node1): checkpoint folder /ckpt is not writable here" in text


def test_collectives_far_below_the_device_kinds_links_are_named():
    one_host = [HostCheck(0, "node0", 8, "NVIDIA H100 80GB HBM3", 10.0, 80.0, 500.0, 90.0, 300.0)]
    text = table(judge(one_host))
    assert (
        "process 0 (node0): slow: all-reduce 90 GB/s per device, 25% of the 360 GB/s expected "
        "of H100 links inside a host" in text
    )
    assert "all-gather" not in text.split("\n", 2)[2]  # 300 of 360 is fine
    # Across hosts the network's figure is expected; an unknown kind expects nothing.
    two_hosts = checks(1000.0, 1000.0)
    for c in two_hosts:
        c.kind, c.allreduce_gbps, c.allgather_gbps = "NVIDIA H100 80GB HBM3", 35.0, 30.0
    assert not any(c.problems for c in judge(two_hosts))
    slow_cpu = [HostCheck(0, "node0", 8, "cpu", 1.0, 8.0, 50.0, 0.01, 0.01)]
    assert not judge(slow_cpu)[0].problems


def preflight_args(run: Path) -> list[str]:
    return [
        "preflight",
        "--config",
        str(REPO / "configs" / "llama_debug.py"),
        f"--config.run.dir={run}",
        "--config.train.seq_len=32",
        "--config.train.global_batch_size=4",
    ]


def run_pinned(tmp_path: Path, busy_loops_on_cpu1: int) -> tuple[list[int], str]:
    """Exit codes and process 0's output of a two-process preflight, process I pinned to CPU
    I (two hosts do not share their CPUs), with busy loops sharing CPU 1."""
    with busy_cpu(1, busy_loops_on_cpu1):
        job = Job(preflight_args(tmp_path / "run"), tmp_path / "logs", cpus=[0, 1])
        codes = job.wait(timeout=400)
    return codes, job.log(0, tail=None)


@pytest.mark.slow
@pinned
def test_two_processes_print_one_table(tmp_path):
    codes, out = run_pinned(tmp_path, 0)
    assert codes == [0, 0], out[-3000:]
    assert "preflight: 2 process(es), 4 devices" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("process  host"))
    assert [lines[header + 1].split()[0], lines[header + 2].split()[0]] == ["0", "1"]
    assert lines[header + 1].split()[-1] == "ok" and lines[header + 2].split()[-1] == "ok"
    assert "preflight: every host passed" in out
    assert not list((tmp_path / "run" / "checkpoints").iterdir())  # the probes are removed


@pytest.mark.slow
@pinned
def test_a_host_with_a_busy_cpu_is_named(tmp_path):
    # XLA runs the matmul probe on several threads, which share the CPU with the loops thread
    # for thread: eight loops left process 1 23% of the fastest host's rate, three up to 57%.
    codes, out = run_pinned(tmp_path, 8)
    assert codes == [1, 1], out[-3000:]
    assert "process 1 (" in out and "slow: matmul" in out, out[-3000:]
    assert "preflight: FAILED on process 1" in out, out[-3000:]
