"""tools/gpu_session.sh: stages in order, each within its limit, rows kept as measured, wheels
installed from a folder without an index."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tools" / "gpu_session.sh"


def _session(out: Path, *stages: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), str(out), *stages],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "GPU_SESSION_SMOKE": "1", **env},
    )


def _probe_wheel(folder: Path) -> None:
    """A minimal pure-Python wheel, `session-probe` 1.0."""
    folder.mkdir()
    info = "session_probe-1.0.dist-info"
    with zipfile.ZipFile(folder / "session_probe-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("session_probe.py", "VERSION = '1.0'\n")
        wheel.writestr(
            f"{info}/METADATA", "Metadata-Version: 2.1\nName: session-probe\nVersion: 1.0\n"
        )
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")


@pytest.mark.slow
def test_a_stage_past_its_limit_is_named_and_the_next_stages_still_run(tmp_path):
    out, wheels = tmp_path / "out", tmp_path / "wheels"
    _probe_wheel(wheels)
    cache = tmp_path / "compile-cache"
    result = _session(
        out,
        "env",
        "bf16",
        "moe",
        "walkthrough",
        LIMIT_MOE="2",
        JAXTRAIN_WHEELS=str(wheels),
        JAXTRAIN_COMPILE_CACHE=str(cache),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "stage moe stopped at its limit of 2 s" in (out / "moe.log").read_text()
    assert "session-probe==1.0" in (out / "env.log").read_text()  # installed without an index
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [r["case"] for r in rows] == ["8b", "1b", "walkthrough"]
    assert "| llama3.2-1b | bf16 |" in (out / "bf16.log").read_text()
    # The stages' programs went to the compilation cache (one folder for this machine's CPU).
    assert len(list(cache.glob("cpu-*/jit_train_step-*"))) == 3
    # The traces of the timed shapes, packed into one file.
    with tarfile.open(out / "traces.tar.gz") as traces:
        names = traces.getnames()
    for case in ("8b-bf16", "1b-bf16"):
        assert any(n.startswith(f"traces/{case}/") and n.endswith(".xplane.pb") for n in names)
    assert not (out / "traces").exists()


def test_an_unknown_stage_is_refused_before_anything_runs(tmp_path):
    result = _session(tmp_path / "out", "bf16", "fp16")
    assert result.returncode == 2
    assert "unknown stage 'fp16'" in result.stderr and "walkthrough" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_session_budget_cuts_the_stage_limits_and_skips_what_no_longer_fits(tmp_path):
    # 40 s, less the 15 s kept to stop a stage and pack the traces: env's 30 s limit is cut.
    result = _session(tmp_path / "a", "env", GPU_SESSION_BUDGET="40")
    assert result.returncode == 0, result.stdout + result.stderr
    (limit,) = [int(n) for n in re.findall(r"^== env \(limit (\d+) s\)$", result.stdout, re.M)]
    assert 10 <= limit <= 25, result.stdout
    assert "jax " in (tmp_path / "a" / "env.log").read_text()
    # 20 s leave under 10 for a stage: each is named as skipped, none runs, and it says so.
    start = time.monotonic()
    result = _session(tmp_path / "b", "env", "bf16", GPU_SESSION_BUDGET="20")
    assert result.returncode == 1, result.stdout + result.stderr
    for stage in ("env", "bf16"):
        assert f"gpu_session: stage {stage} skipped: " in result.stdout, result.stdout
    assert "of the session's budget of 20 s" in result.stdout
    assert not list((tmp_path / "b").iterdir()) and time.monotonic() - start < 10


def test_a_budget_that_is_not_whole_seconds_is_refused(tmp_path):
    result = _session(tmp_path / "out", "env", GPU_SESSION_BUDGET="10m")
    assert result.returncode == 2
    assert "GPU_SESSION_BUDGET=10m: give whole seconds" in result.stderr
    assert not (tmp_path / "out").exists()
