"""MFU is physical: every logged figure of a log_every=1 run is at most 1, against the peak of
the precision the run's matmuls take."""

from __future__ import annotations

import types

import jax
import pytest
from conftest import REPO

from jaxtrain.config import loader as config_lib
from jaxtrain.hardware import backend, peaks
from jaxtrain.rundir.metrics import read_jsonl
from jaxtrain.trainer import Trainer


def demo_sized(tmp_path, dtype: str, steps: int):
    """The demo's model, batch and sequence on synthetic tokens, logging every step."""
    return config_lib.load_config(
        str(REPO / "configs" / "demo.py"),
        {
            "run.dir": str(tmp_path / "run"),
            "data.kind": "synthetic",
            "data.prepare": "",
            "data.paths": "",
            "data.val_paths": "",
            "data.tokenizer": "",
            "train.steps": steps,
            "train.log_every": 1,
            "train.eval_every": 0,
            "train.progress": False,
            "checkpoint.every": 0,
            "sample.prompt": "",
            "model.dtype": dtype,
        },
    )


@pytest.mark.parametrize(
    "dtype, steps",
    [("bfloat16", 30), pytest.param("float32", 200, marks=pytest.mark.slow)],
)
def test_every_logged_mfu_of_a_log_every_1_run_is_at_most_1(tmp_path, dtype, steps):
    cfg = demo_sized(tmp_path, dtype, steps)
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    try:
        trainer.run()
    finally:
        trainer.close()
    bf16_dots = bool(backend.cpu_flags() & backend.BF16_DOT_FLAGS)
    expected = "bfloat16" if dtype == "bfloat16" and bf16_dots else "float32"
    assert trainer.throughput.peak_source == f"measured {expected} matmul"
    mfus = [r["mfu"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "mfu" in r]
    # Every step but the first (compiling), the second (queued before the window opened) and
    # the last (read right after its own dispatch).
    assert len(mfus) == steps - 3
    assert all(0 < m <= 1 for m in mfus), max(mfus)


def test_the_peak_is_that_of_the_precision_the_matmuls_take():
    assert peaks.matmul_dtype_of("bfloat16", bf16_products=True) == "bfloat16"
    # Widened operands (CPUs without bfloat16 dot instructions) multiply in float32.
    assert peaks.matmul_dtype_of("bfloat16", bf16_products=False) == "float32"
    assert peaks.matmul_dtype_of("float32", bf16_products=True) == "float32"
    peak, source = peaks.peak_flops(matmul_dtype="bfloat16")
    assert source == "measured bfloat16 matmul" and peak > 0


def test_a_cpu_clock_that_did_not_count_the_matmul_is_not_believed(monkeypatch):
    """A run whose CPU time reads near zero (seen once: a tenth of its wall time) would make
    the CPU-time peak absurd; the wall clock's figure stands instead."""
    measure = peaks.measured_matmul_flops.__wrapped__  # not the figure cached for the process
    wall_only = measure(size=256, repeats=5)
    monkeypatch.setattr(peaks.time, "process_time", lambda: 0.0)  # a CPU clock that stands still
    frozen = measure(size=256, repeats=5)
    assert frozen < 10 * wall_only  # unguarded: 2 x 256^3 FLOPs over 1 ns, 3e16 FLOP/s


def test_a_few_runs_whose_cpu_time_reads_low_do_not_lift_the_peak(monkeypatch):
    """Every eighth run's CPU time reads 0.6 of its wall time where the two cores' threads ran
    for twice it (a thread on the other core not accounted yet): the outliers' rate, 3.3x the
    wall clock's, must not become the peak."""
    wall_step, calls = 0.0025, {"wall": 0, "cpu": 0}

    def perf_counter() -> float:  # each run takes wall_step
        calls["wall"] += 1
        return calls["wall"] * wall_step

    def process_time() -> float:  # a run's CPU time: 2 x its wall time, 0.6 x in every eighth
        calls["cpu"] += 1
        run, end = divmod(calls["cpu"] - 1, 2)
        return run + end * wall_step * (0.6 if run % 8 == 0 else 2.0)

    clocks = types.SimpleNamespace(perf_counter=perf_counter, process_time=process_time)
    monkeypatch.setattr(peaks, "time", clocks)  # peaks' clocks only, not jax's
    monkeypatch.setattr(peaks, "_usable_cores", lambda: 2)
    measured = peaks.measured_matmul_flops.__wrapped__(size=64, repeats=40)
    assert measured == pytest.approx(2 * 64**3 / wall_step)  # the wall clock's, not 3.3x it
