"""tools/bench_grouped_matmul.py on a small shape: one table row per dtype and contender, each
timed relative to ragged_dot."""

from __future__ import annotations

import re

from conftest import load_tool


def test_report_times_every_contender_at_every_dtype(capsys) -> None:
    bench = load_tool("bench_grouped_matmul")
    argv = ["--rows", "64", "--dims", "8x12", "--groups", "4", "--tiles", "4,8", "--rounds", "2"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU: ")
    rows = re.findall(r"^\| (\w+) \| ([^|]+) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)
    assert [(dtype, name.strip()) for dtype, name, _, _ in rows] == [
        (dtype, name)
        for dtype in ("float32", "bfloat16")
        for name in ("jax.lax.ragged_dot", "tiles of 4 rows", "tiles of 8 rows")
    ]
    assert all(float(ms) > 0 for _, _, ms, _ in rows)
    assert [ratio for _, name, _, ratio in rows if "ragged" in name] == ["1.00", "1.00"]
