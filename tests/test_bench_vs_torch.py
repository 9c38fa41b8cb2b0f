"""tools/bench_vs_torch.py runs every contender and compares each with jaxtrain at its precision."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytest.importorskip("torch")


@pytest.mark.slow  # four processes, each importing torch or jax and building a model
def test_report_compares_each_contender_with_jaxtrain_at_its_precision(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "bench_vs_torch.py"),
            "--no-compile",
            "--bf16",
            "--rounds=2",
            "--steps=1",
            "--warmup=1",
            "--settle=0",
            "--config.model.num_layers=1",
            "--config.model.vocab_size=512",
            "--config.train.global_batch_size=2",
            "--config.train.seq_len=64",
        ],
        cwd=tmp_path,  # the tool finds the repository from its own path
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = out.stdout
    assert "CPU: " in report and "bfloat16 products" in report
    assert re.search(r"measured matmul peak [\d.]+ GFLOP/s float32, [\d.]+ bfloat16", report)
    rows = dict(re.findall(r"^ *(.+?): +([\d,]+) tokens/s", report, re.M))
    assert set(rows) == {"jaxtrain", "torch eager", "jaxtrain bf16", "torch autocast bf16"}
    assert "jaxtrain bf16/torch autocast bf16 = " in report
    assert "jaxtrain/torch eager = " in report

    # Per CPU-second, each ratio is the same-precision jaxtrain's figure over the contender's.
    line = next(x for x in report.splitlines() if x.startswith("per CPU-second: "))
    cpu = {
        name: (float(rate.replace(",", "")), float(ratio))
        for name, rate, ratio in re.findall(r"([a-z. 0-9]+?) ([\d,]+) \(([\d.]+)x\)", line[16:])
    }
    cpu = {name.strip(", "): value for name, value in cpu.items()}
    assert set(cpu) == set(rows)
    for name, (rate, ratio) in cpu.items():
        ours = "jaxtrain bf16" if name.endswith("bf16") else "jaxtrain"
        assert ratio == pytest.approx(cpu[ours][0] / rate, abs=0.006), (name, line)
