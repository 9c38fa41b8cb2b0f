"""The GPU parity check runs end to end on any backend, and flags a kernel that computes wrong."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _load_tool():
    spec = importlib.util.spec_from_file_location("gpu_parity", REPO / "tools" / "gpu_parity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_attention_check_passes_the_kernel_and_flags_a_wrong_mask(monkeypatch):
    tool = _load_tool()
    shape = (1, 128, 4, 2, 16)
    rows = tool._attention_rows(["blockwise"], shape, window=0)
    assert [row[1] for row in rows] == ["out", "dq", "dk", "dv"]
    assert all(0 < error <= tolerance for _, _, error, tolerance in rows)

    real = tool.self_attention

    def sees_two_tokens(spec, q, k, v, segment, scale, *rest, **kwargs):
        # A kernel whose mask is wrong: blockwise runs as if the window were 2 tokens.
        if spec.attention_impl == "blockwise":
            spec = tool.ModelSpec(attention_impl="blockwise", dtype=spec.dtype, sliding_window=2)
        return real(spec, q, k, v, segment, scale, *rest, **kwargs)

    monkeypatch.setattr(tool, "self_attention", sees_two_tokens)
    wrong = tool._attention_rows(["blockwise"], shape, window=0)
    assert all(error > 10 * tolerance for _, _, error, tolerance in wrong)


def test_grouped_matmul_check_passes_the_kernel_and_flags_rows_in_the_wrong_group(monkeypatch):
    tool = _load_tool()
    rows = tool._grouped_matmul_rows((256, 32, 64, 4))
    assert [row[1] for row in rows] == ["out", "dx", "dw"]
    assert all(0 < error <= tolerance for _, _, error, tolerance in rows)

    real = tool.grouped_matmul.grouped_matmul

    def off_by_one_row(x, w, sizes):
        # A kernel whose group offsets are off by one: each group's first row goes to the last.
        return real(x, w, sizes.at[0].add(1).at[-2].add(-1))

    monkeypatch.setattr(tool.grouped_matmul, "grouped_matmul", off_by_one_row)
    wrong = tool._grouped_matmul_rows((256, 32, 64, 4))
    assert any(error > tolerance for _, _, error, tolerance in wrong)


@pytest.mark.slow
def test_gpu_parity_script_runs_in_smoke_mode():
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / "gpu_parity.py"), "--smoke", "--steps", "2"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| check ")]
    checks = {line.split(" | ")[0].lstrip("| ") for line in rows}
    # On CPU: blockwise attention (causal and windowed), and train steps with fp8 matmuls.
    assert "train step 2: fp8 matmuls" in checks
    assert "train step 2: experts (tiles), bf16" in checks
    assert any(check.startswith("grouped matmul") for check in checks)
    assert any(check.endswith("window 64: blockwise") for check in checks)
    assert all(line.rstrip().endswith("| ok |") for line in rows)
    assert f"{len(rows)} of {len(rows)} within tolerance" in result.stdout
