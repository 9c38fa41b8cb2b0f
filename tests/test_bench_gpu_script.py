"""The prepared GPU benchmark script runs end to end (on tiny shapes, so on any backend)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _bench_gpu(*args: str, **env: str) -> subprocess.CompletedProcess:
    """tools/bench_gpu.py --smoke with `args` and `env`, from the repository root."""
    return subprocess.run(
        [sys.executable, str(REPO / "tools" / "bench_gpu.py"), "--smoke", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
        env={**os.environ, **env},
    )


@pytest.mark.slow
def test_gpu_benchmark_script_runs_every_shape_in_smoke_mode(tmp_path):
    record = tmp_path / "rows.jsonl"
    result = _bench_gpu(
        "--fp8",
        "--fp8-recipes",
        "delayed,current",
        "--moe",
        "--walkthrough",
        "--record",
        str(record),
        "--steps",
        "1",
        "--warmup",
        "1",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    table = [line.split(" | ") for line in lines if line.startswith("| ") and "| shape" not in line]
    shapes = [
        "| llama3-8b, 8 of 32 layers",
        "| llama3.2-1b",
        "| mixtral-8x7b, 2 of 32 layers",
        "| qwen3-30b-a3b, 4 of 48 layers",
    ]
    precisions = ("bf16", "fp8-delayed", "fp8-current")
    assert [row[:2] for row in table] == [[s, p] for s in shapes for p in precisions]
    # fp8 rows, one per scaling recipe: their speed-up over bf16.
    assert [row[6].endswith("x") for row in table[:3]] == [False, True, True]
    # The expert models' rows carry their expert block's figures; the dense ones none.
    assert ["of the step" in row[9] for row in table] == [False] * 6 + [True] * 6
    assert "walkthrough: step 5 reached" in result.stdout
    # Every row is on file, one JSON line each, as measured.
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(r["case"], r["precision"]) for r in rows] == [
        (case, precision)
        for case in ("8b", "1b", "mixtral", "qwen3-moe")
        for precision in precisions
    ] + [("walkthrough", "bf16")]
    assert all(r["tokens_per_s"] > 0 for r in rows)
    assert [r.get("fp8_recipe") for r in rows[:3]] == [None, "delayed", "current"]
    assert rows[-1]["steps"] == 5 and rows[-1]["time_to_last_step_s"] > rows[-1]["compile_s"]


def test_an_unknown_case_is_refused_with_the_known_ones():
    result = _bench_gpu("--cases", "8b,70b")
    assert result.returncode != 0
    assert "--cases 70b: not one of 8b, 1b, mixtral, qwen3-moe, walkthrough" in result.stderr


def test_an_unknown_fp8_recipe_is_refused_with_the_known_ones():
    result = _bench_gpu("--fp8", "--fp8-recipes", "delayed,tensorwise", "--cases", "8b")
    assert result.returncode != 0
    assert "--fp8-recipes 'delayed,tensorwise': name one or more of delayed, current" in (
        result.stderr
    )


def test_a_profiled_shape_prints_where_its_traced_steps_went(tmp_path):
    result = _bench_gpu(
        "--cases", "1b", "--profile", str(tmp_path), "--steps", "1", "--warmup", "1"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "llama3.2-1b (bf16), traced steps:" in result.stdout
    assert " with dots (jit_train_step)" in result.stdout  # the products' rates
    assert (tmp_path / "1b-bf16" / "program.hlo.txt").is_file()


def test_xla_options_compile_every_shape_and_stay_with_its_rows(tmp_path):
    record = tmp_path / "rows.jsonl"
    option = "xla_gpu_enable_latency_hiding_scheduler=false"  # a GPU's option: XLA's on any host
    result = _bench_gpu("--cases", "1b", "--xla", option, "--record", str(record), "--steps", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"; compile options {option}" in result.stdout.splitlines()[0]
    assert [json.loads(line)["xla_options"] for line in record.read_text().splitlines()] == [option]
    refused = _bench_gpu("--cases", "1b", "--xla", "xla_gpu_no_such_option=1")
    assert refused.returncode == 2
    assert "--xla='xla_gpu_no_such_option=1': XLA refused it: " in refused.stderr
    assert "No such compile option" in refused.stderr


def test_a_rerun_with_a_compile_cache_marks_the_rows_it_loaded(tmp_path):
    record = tmp_path / "rows.jsonl"
    args = ("--cases", "1b", "--compile-cache", str(tmp_path / "cache"), "--record", str(record))
    every_compile_stored = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    runs = [_bench_gpu(*args, "--steps", "1", **every_compile_stored) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stdout + run.stderr
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert [r["compile_cached"] for r in rows] == [False, True]
    cells = [[c for c in run.stdout.splitlines() if c.startswith("| llama3.2-1b")] for run in runs]
    assert [cell[0].split(" | ")[7].endswith(" cached") for cell in cells] == [False, True]
    assert "(from the compilation cache)" in runs[1].stdout
