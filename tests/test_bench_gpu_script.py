"""The prepared GPU benchmark script runs end to end (on tiny shapes, so on any backend)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu_benchmark_script_runs_every_shape_in_smoke_mode():
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "bench_gpu.py"),
            "--smoke",
            "--fp8",
            "--steps",
            "1",
            "--warmup",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    table = [line.split(" | ") for line in result.stdout.splitlines() if line.startswith("| llama")]
    assert [row[:2] for row in table] == [
        ["| llama3-8b, 8 of 32 layers", "bf16"],
        ["| llama3-8b, 8 of 32 layers", "fp8"],
        ["| llama3.2-1b", "bf16"],
        ["| llama3.2-1b", "fp8"],
    ]
    assert table[1][6].endswith("x") and table[0][6] == ""  # fp8 rows: speed-up over bf16
    assert "MFU" in result.stdout
