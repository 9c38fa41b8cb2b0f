"""MFU of jaxtrain's train step on one GPU (NVIDIA H100/H200, AMD MI300X/MI325X/MI355X), bf16
and, with --fp8, fp8 matmuls against bf16.

Two shapes, each compiled once and timed over warm steps on a device-resident synthetic batch:
a Llama-3-8B-shaped model cut to 8 layers (the full 32 layers' weights plus AdamW state do not fit
one device) and the whole Llama 3.2 1B, both at 8192-token sequences with float32 parameters and
bfloat16 compute, as the preset configs train. It installs nothing beyond the project, prints one
line per shape and a table, and finishes in a few minutes (compiles take most of it).

    python tools/bench_gpu.py                 # on the GPU machine
    python tools/bench_gpu.py --fp8           # each shape in bf16, then model.quantization=fp8
    python tools/bench_gpu.py --smoke         # tiny shapes, any backend: checks the script runs

MFU is against the data-sheet dense bf16 peak of the device, or its fp8 peak for the fp8 runs
(`jaxtrain.hardware.peaks`); `--peak-tflops` overrides it for a device the table does not know. The fp8
rows also give the step-time speed-up over the same shape in bf16 (on a CPU, or a GPU without
float8 units, XLA emulates the types and fp8 is slower).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # runs from a clone without installing

# GPU flags that overlap collectives and compute; harmless with one device, kept for parity with
# the multi-device launchers in docker/.
os.environ.setdefault("XLA_FLAGS", "--xla_gpu_enable_latency_hiding_scheduler=true")

import jax  # noqa: E402

from jaxtrain.commands import bench  # noqa: E402
from jaxtrain.config import loader as config_lib  # noqa: E402

# (name, config file, overrides): global batch x seq_len tokens per step, sized so weights, AdamW
# state, remat residuals and the float32 [tokens, 128256] logits fit one H200 (141 GB) or MI300X
# (192 GB); on an 80 GB H100 the 8B shape may run out of memory, and the script goes on.
CASES = [
    (
        "llama3-8b, 8 of 32 layers",
        "configs/llama3_8b.py",
        [
            "--config.model.num_layers=8",
            "--config.train.seq_len=8192",
            "--config.train.global_batch_size=2",
            "--config.model.remat=minimal",
        ],
    ),
    (
        "llama3.2-1b",
        "configs/llama3_2_1b.py",
        [
            "--config.train.seq_len=8192",
            "--config.train.global_batch_size=4",
            "--config.model.remat=minimal",
        ],
    ),
]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=0.0,
        help="per-device bf16 peak for MFU when the device is not in the table",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (any backend)")
    parser.add_argument(
        "--fp8", action="store_true", help="also time each shape with model.quantization=fp8"
    )
    args = parser.parse_args(argv)
    precisions = ("bf16", "fp8") if args.fp8 else ("bf16",)

    device = jax.devices()[0]
    print(
        f"device: {device.device_kind} ({device.platform}), {jax.device_count()} visible; "
        f"jax {jax.__version__}; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')}",
        flush=True,
    )
    rows = []
    for name, path, overrides in CASES:
        for precision in precisions:
            figures = _run(name, path, overrides, precision, args)
            if figures is not None:
                rows.append((name, precision, figures))

    print(
        "\n| shape | matmuls | tokens/step | tokens/s | MFU | step ms | vs bf16 | compile s | "
        "params |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    bf16_step = {name: f["step_time_s"] for name, precision, f in rows if precision == "bf16"}
    for name, precision, f in rows:
        speedup = (
            f"{bf16_step[name] / f['step_time_s']:.2f}x"
            if precision == "fp8" and name in bf16_step
            else ""
        )
        print(
            f"| {name} | {precision} | {f['tokens']:,} | {f['tokens_per_s']:,.0f} | "
            f"{f['mfu']:.1%} | {f['step_time_s'] * 1e3:.0f} | {speedup} | "
            f"{f['compile_s']:.0f} | {f['num_params'] / 1e9:.2f}B |"
        )
    return 0 if len(rows) == len(CASES) * len(precisions) else 1


def _run(
    name: str, path: str, overrides: list[str], precision: str, args: argparse.Namespace
) -> dict | None:
    """One shape's figures in one precision, or None (printed) when it fails."""
    overrides = overrides + (bench.TINY_SHAPE if args.smoke else [])
    if precision == "fp8":
        overrides.append("--config.model.quantization=fp8")
    if args.peak_tflops:
        overrides.append(f"--config.train.peak_flops={args.peak_tflops * 1e12}")
    cfg = config_lib.load_config(str(REPO / path), overrides)
    start = time.perf_counter()
    try:
        figures = bench.benchmark(
            cfg, steps=args.steps, warmup=args.warmup, devices=jax.devices()[:1]
        )
    except Exception as error:  # one shape failing (memory) must not hide the others
        print(
            f"{name} ({precision}): failed after {time.perf_counter() - start:.0f} s: "
            f"{type(error).__name__}: {str(error).splitlines()[0][:300]}",
            flush=True,
        )
        return None
    print(bench.format_report(f"{name} ({precision})", figures), flush=True)
    figures["tokens"] = cfg.train.global_batch_size * cfg.train.seq_len
    return figures


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
