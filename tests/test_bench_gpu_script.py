"""The prepared GPU benchmark script runs end to end (on tiny shapes, so on any backend)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu_benchmark_script_runs_every_shape_in_smoke_mode():
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / "bench_gpu.py"), "--smoke", "--steps", "1",
         "--warmup", "1"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    table = [line for line in result.stdout.splitlines() if line.startswith("| llama")]
    assert [line.split(" | ")[0] for line in table] == ["| llama3-8b, 8 of 32 layers",
                                                         "| llama3.2-1b"]
    assert "MFU" in result.stdout
