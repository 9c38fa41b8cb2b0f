"""tools/bench_products.py: the bench step's product shapes, and a report that adds them up."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, load_tool

from jaxtrain.config import loader as config_lib


def _tool():
    return load_tool("bench_products")


def _spec(*overrides):
    cfg = config_lib.load_config(str(REPO / "configs" / "bench_tiny_llama.py"), list(overrides))
    return config_lib.validate(cfg)


def test_every_projection_pass_is_counted_once_per_layer_under_its_shape():
    # Heads of 16 make q (8 x 16 = 128) narrower than the model (256), so q, o and k/v differ.
    spec = _spec("--config.model.head_dim=16", "--config.model.num_layers=3")
    products = _tool().step_products(spec, tokens=512)
    by_shape = {(p.m, p.k, p.n): p for p in products}
    assert len(by_shape) == len(products)  # one entry per shape

    # Three passes of seven projections per layer and of the output layer.
    assert sum(p.per_step for p in products) == 3 * (7 * 3 + 1)
    # k and v share their shapes, as do gate and up: 3 + 3 layers of each pass.
    k = by_shape[(512, 256, 64)]
    assert k.names == ("k", "v") and k.per_step == 6
    assert by_shape[(256, 512, 688)].names == ("gate kernel grad", "up kernel grad")
    assert by_shape[(512, 688, 256)].names == ("gate input grad", "up input grad", "down")
    assert by_shape[(512, 688, 256)].per_step == 9
    # The output layer runs once a step, not once a layer.
    assert by_shape[(256, 512, 8192)].per_step == 1
    assert by_shape[(512, 8192, 256)].names == ("output input grad",)
    assert by_shape[(512, 128, 256)].names == ("q input grad", "o")


def test_report_adds_up_the_time_one_step_spends_in_products():
    tool = _tool()
    products = tool.step_products(_spec("--config.model.num_layers=2"), tokens=64)
    best = {
        lib: {("float32", i): (i + 1) * scale * 1e-3 for i in range(len(products))}
        for lib, scale in (("XLA", 2.0), ("torch", 1.0))
    }
    text = tool.report(products, ["float32"], best)
    rows = re.findall(
        r"^\| \[(\d+), (\d+)\] x \[\d+, (\d+)\] \| (\d+) \| ([\d.]+) \| ([\d.]+) \| "
        r"([\d.]+) \|",
        text,
        re.M,
    )
    assert len(rows) == len(products)
    for i, (p, row) in enumerate(zip(products, rows)):
        assert (int(row[0]), int(row[1]), int(row[2]), int(row[3])) == (p.m, p.k, p.n, p.per_step)
        assert float(row[5]) == pytest.approx(p.flops / ((i + 1) * 1e-3) / 1e9, abs=0.051)
        assert float(row[6]) == 2.0
    step_ms = sum(p.per_step * (i + 1) for i, p in enumerate(products))
    line = re.search(r"products of one step, float32: XLA ([\d.]+) ms, torch ([\d.]+) ms", text)
    assert float(line[1]) == pytest.approx(2 * step_ms, abs=0.05)
    assert float(line[2]) == pytest.approx(step_ms, abs=0.05)


@pytest.mark.slow  # two processes, one importing torch and one jax
def test_tool_times_each_shape_with_both_libraries():
    pytest.importorskip("torch")
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "bench_products.py"),
            "--bf16",
            "--rounds=2",
            "--repeats=1",
            "--config.model.num_layers=1",
            "--config.model.vocab_size=512",
            "--config.train.global_batch_size=2",
            "--config.train.seq_len=64",
        ],
        cwd=Path("/"),  # the tool finds the repository from its own path
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("CPU: ")
    tool = _tool()
    spec = _spec("--config.model.num_layers=1", "--config.model.vocab_size=512")
    shapes = {(p.m, p.k, p.n) for p in tool.step_products(spec, tokens=128)}
    for dtype in ("float32", "bfloat16"):
        table = out.stdout.split(f"{dtype}: GFLOP/s")[1].split("products of one step")[0]
        rows = re.findall(
            r"^\| \[(\d+), (\d+)\] x \[\d+, (\d+)\] \| \d+ \| ([\d.]+) \| ([\d.]+)", table, re.M
        )
        assert {tuple(map(int, r[:3])) for r in rows} == shapes
        assert all(float(r[3]) > 0 and float(r[4]) > 0 for r in rows)
        assert re.search(
            rf"products of one step, {dtype}: XLA [\d.]+ ms, torch [\d.]+ ms", out.stdout
        )
