"""`jaxtrain profile`: a trace's time per step by XLA operation, loops counted through their
body's ops, and each product's FLOP rate from the program's optimised HLO."""

from __future__ import annotations

import gzip
import json

import jax
import jax.numpy as jnp
import pytest
from conftest import REPO

from jaxtrain import cli
from jaxtrain.commands import bench
from jaxtrain.commands import profile as profile_command
from jaxtrain.errors import ConfigError
from jaxtrain.planning import hlo_flops
from jaxtrain.rundir import profile, trace_ops

LAYERS = 3


def _layers(x, w_LDD):
    x, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, w_LDD)
    return x @ x.T


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """Two annotated runs of a program holding a loop of products and one product after it:
    (the trace folder, the program's optimised HLO)."""
    folder = tmp_path_factory.mktemp("trace")
    x, w = jnp.ones((128, 64)), jnp.full((LAYERS, 64, 64), 0.01)
    compiled = jax.jit(_layers).lower(x, w).compile()
    compiled(x, w).block_until_ready()
    with jax.profiler.trace(str(folder)):
        for step in range(2):
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                compiled(x, w).block_until_ready()
    return folder, compiled.as_text()


def test_each_products_flops_are_counted_once_per_run_through_the_loop(traced):
    folder, hlo = traced
    summary = trace_ops.summarise(folder, profile_command.program_facts(hlo))
    assert summary.steps == 2
    # The loop's own event spans its body's ops: only those count.
    assert not [r for r in summary.ops if r.name.startswith("while")]
    products = [r for r in summary.ops if r.flops_per_step]
    assert sorted(r.runs_per_step for r in products) == [1.0, LAYERS]
    assert sum(r.flops_per_step for r in products) == hlo_flops.dot_flops(hlo)
    assert sum(r.flops_per_step for r in products) == LAYERS * 2 * 128 * 64 * 64 + 2 * 128**2 * 64
    assert all(r.tflops_per_s > 0 for r in products)
    assert sum(r.share for r in summary.ops) == pytest.approx(1.0)
    assert 0 < summary.busy_ms_per_step <= summary.op_ms_per_step + 1e-9
    kinds = {r.name for r in summary.kinds}
    assert any(k.endswith(" with dots") for k in kinds)
    assert not [r.result for r in summary.kinds if r.result]  # a kind has no one result
    # Each op is named with its result: the loop's products [128, 64], the last [128, 128].
    results = {r.runs_per_step: r.result for r in products}
    assert results == {LAYERS: "f32[128,64]", 1.0: "f32[128,128]"}


def test_without_the_program_the_ops_are_timed_without_rates(traced):
    folder, _ = traced
    summary = trace_ops.summarise(folder)
    assert summary.ops and not [r for r in summary.ops if r.flops_per_step]
    text = trace_ops.format_summary(summary, top=2)
    assert "2 step(s)" in text and f"{len(summary.ops) - 2} more" in text


def _event(tid, ts, dur, op):
    args = {"hlo_op": op, "hlo_module": "jit_step"}
    return {"ph": "X", "pid": 1, "tid": tid, "ts": ts, "dur": dur, "name": op, "args": args}


def test_nested_events_count_their_innermost_ops_and_overlaps_count_once_as_busy(tmp_path):
    events = [
        _event(1, 0, 100, "while.1"),  # holds the two below
        _event(1, 10, 30, "fusion.2"),
        _event(1, 50, 40, "call.3"),  # holds fusion.4
        _event(1, 60, 20, "fusion.4"),
        _event(2, 70, 40, "all-reduce-start.5"),  # another lane, overlapping fusion.4
        {
            "ph": "X",
            "pid": 1,
            "tid": 9,
            "ts": 0,
            "dur": 200,
            "name": "train",
            "args": {"step_num": "7"},
        },  # fmt: skip
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
    ]
    path = tmp_path / "host.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    summary = trace_ops.summarise(tmp_path)
    assert [(r.name, r.ms_per_step) for r in summary.ops] == [
        ("all-reduce-start.5", 0.04),
        ("fusion.2", 0.03),
        ("fusion.4", 0.02),
    ]
    assert summary.steps == 1 and summary.op_ms_per_step == pytest.approx(0.09)
    # 10-40, 60-80 and 70-110 on the two lanes: 30 + 50 us with an op running.
    assert summary.busy_ms_per_step == pytest.approx(0.08)
    assert [(r.name, r.runs_per_step) for r in summary.kinds] == [
        ("fusion", 2), ("all-reduce-start", 1)
    ]  # fmt: skip
    # fusion.4 shared 70-80 with the all-reduce: half of its time alone, three quarters of the
    # all-reduce's; the enclosing loop and call do not count as running beside their ops.
    alone = {r.name: r.alone for r in summary.ops}
    assert alone == {"all-reduce-start.5": 0.75, "fusion.2": 1.0, "fusion.4": 0.5}
    assert {r.name: r.alone for r in summary.kinds} == {"fusion": 0.8, "all-reduce-start": 0.75}
    text = trace_ops.format_summary(summary)
    assert "     0.020  22.2%    50%       1.0           fusion.4 (jit_step)" in text


def test_ops_that_only_touch_ran_alone_and_a_third_lane_is_counted_once():
    ops = [
        trace_ops.OpEvent("m", "a", (1, 1), 0, 10),
        trace_ops.OpEvent("m", "b", (1, 1), 10, 10),  # starts as a ends
        trace_ops.OpEvent("m", "c", (1, 2), 15, 10),  # beside b for 5 us
        trace_ops.OpEvent("m", "d", (1, 3), 16, 2),  # beside b and c
    ]
    assert trace_ops.alone_us(ops) == [10, 5, 5, 0]


def test_bench_profile_prints_the_summary_with_the_products_rates(tmp_path, capsys):
    config = str(REPO / "configs" / "llama_debug.py")
    argv = ["bench", "--config", config, *bench.TINY_SHAPE, "--steps", "1", "--warmup", "1"]
    argv += ["--config.train.global_batch_size=8", "--config.train.micro_batch_size=8"]
    assert cli.main([*argv, "--profile", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / profile.PROGRAM_FILE).read_text().startswith("HloModule ")
    assert "2 step(s)" in out and " with dots (jit_train_step)" in out
    # The command reads the program beside the traces by itself.
    assert profile_command.summary_text(tmp_path) in out


def test_a_path_without_traces_is_one_line_naming_it(tmp_path, capsys):
    assert cli.main(["profile", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"no *.trace.json.gz file under {tmp_path}" in err and "\n" not in err
    (tmp_path / "x.trace.json.gz").write_bytes(b"not gzip")
    assert cli.main(["profile", str(tmp_path / "x.trace.json.gz")]) == 2
    assert "is not a readable profiler trace" in capsys.readouterr().err


def test_a_trace_that_names_no_op_says_why(tmp_path):
    with gzip.open(tmp_path / "h.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": [{"ph": "X", "name": "python", "ts": 0, "dur": 1}]}, f)
    with pytest.raises(ConfigError, match="names no XLA operation"):
        trace_ops.summarise(tmp_path)


# A GPU program's products as XLA's GPU compilers print them: custom calls to the BLAS
# library, the result first in a tuple with the library's workspace, or alone; the lhs named
# or printed with its type; the contracted dimensions in the backend config, quoted or not.
GPU_PROGRAM = """HloModule jit_train_step, entry_computation_layout={()}

ENTRY %main (a: bf16[8192,4096], b: bf16[4096,14336]) -> bf16[8192,14336] {
  %a = bf16[8192,4096]{1,0} parameter(0)
  %b = bf16[4096,14336]{1,0} parameter(1)
  %custom-call.3 = (bf16[8192,14336]{1,0}, s8[4194304]{0}) custom-call(%a, %b), custom_call_target="__cublas$gemm", backend_config={"operation_queue_id":"0","gemm_backend_config":{"alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"epilogue":"DEFAULT"}}
  %g = bf16[8192,14336]{1,0} get-tuple-element(%custom-call.3), index=0
  %custom-call.4 = bf16[4096,14336]{1,0} custom-call(bf16[8192,4096]{1,0} %a, bf16[8192,14336]{1,0} %g), custom_call_target="__cublas$lt$matmul", backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":[0],"rhs_contracting_dimensions":[0]}}}
  ROOT %custom-call.5 = bf16[2,8,64]{2,1,0} custom-call(%a), custom_call_target="__cudnn$fmhaSoftmax", backend_config={}
}
"""


def test_a_gpu_programs_blas_calls_are_products_with_their_flops_and_results():
    gemm = 2 * 8192 * 14336 * 4096
    assert hlo_flops.op_flops(GPU_PROGRAM) == {"custom-call.3": gemm, "custom-call.4": gemm}
    assert hlo_flops.dot_flops(GPU_PROGRAM) == 2 * gemm
    program = profile_command.program_facts(GPU_PROGRAM)
    assert program.module == "jit_train_step"
    assert program.results["custom-call.3"] == "bf16[8192,14336]"  # not the workspace
    assert program.results["custom-call.5"] == "bf16[2,8,64]"  # attention: no product
