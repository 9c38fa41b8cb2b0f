"""MFU of jaxtrain's train step on one GPU (NVIDIA H100/H200, AMD MI300X/MI325X/MI355X), bf16
and, with --fp8, fp8 matmuls against bf16; expert models with their expert block alone; and the
time a short pretraining run takes to its last step.

Each shape is compiled once and timed over warm steps on a device-resident synthetic batch,
with float32 parameters and bfloat16 compute, as the preset configs train:
- dense: a Llama-3-8B-shaped model cut to 8 layers (the full 32 layers' weights plus AdamW state
  do not fit one device) and the whole Llama 3.2 1B, at 8192-token sequences;
- --moe: Mixtral 8x7B cut to 2 layers and Qwen3-30B-A3B cut to 4, whole experts, dropless
  routing, 4 x 4096 tokens; then one expert block alone, forward and backward
  (`jaxtrain.commands.bench_experts`), and its share of the step;
- --walkthrough: Qwen3-0.6B, 64 x 1024 tokens a step in micro batches of 32, 300 steps through
  the trainer's own loop on synthetic tokens: seconds to step 300 from start, compile included.
It installs nothing beyond the project, prints each row as it is measured, then a table.

    python tools/bench_gpu.py                       # the dense shapes, on the GPU machine
    python tools/bench_gpu.py --fp8 --moe           # bf16 and fp8; the expert models too
    python tools/bench_gpu.py --fp8 --fp8-recipes delayed,current --cases 8b
    python tools/bench_gpu.py --cases mixtral,walkthrough --record rows.jsonl
    python tools/bench_gpu.py --smoke --moe --walkthrough   # tiny shapes: checks it runs

MFU is against the data-sheet dense bf16 peak of the device, or its fp8 peak for the fp8 runs
(`jaxtrain.hardware.peaks`); `--peak-tflops` overrides it for a device the table does not know.
`--xla NAME=VALUE` (repeatable) compiles every shape with that XLA option
(`backend.xla_options`), printed at the start and kept with each row: a flag's before/after is
two runs of the script, or `tools/bench_ab.py --b-xla` for one shape in one process.
`--compile-cache DIR` keeps the compiled programs in DIR (`backend.compile_cache`), so that a
rerun on the same machine skips the compiles; a program loaded from it is marked "cached" in
the compile column and `compile_cached` in its row, since its seconds are no compile time.
FLOPs count the active experts (`ModelSpec.flops_per_token`). The fp8 rows, one per scaling
recipe of `--fp8-recipes` (`model.fp8_recipe`: "delayed", the default, from an amax history;
"current", from the tensor itself; precision `fp8-<recipe>`), also give the step-time speed-up
over the same shape in bf16 (on a CPU, or a GPU without float8 units, XLA
emulates the types and fp8 is slower). `--record` appends every row to a file as a JSON line
when it is measured, so a run stopped by a time limit keeps what it measured; `--profile DIR`
adds a JAX profiler trace of two more steps of each shape, for XProf or Perfetto, and prints
where their time went per XLA op, with the products' FLOP rates (`jaxtrain profile`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # runs from a clone without installing

# GPU flags that overlap collectives and compute; harmless with one device, kept for parity with
# the multi-device launchers in docker/.
os.environ.setdefault("XLA_FLAGS", "--xla_gpu_enable_latency_hiding_scheduler=true")

import jax  # noqa: E402

from jaxtrain.commands import bench, bench_experts, options  # noqa: E402
from jaxtrain.commands import profile as profile_command  # noqa: E402
from jaxtrain.config import loader as config_lib  # noqa: E402
from jaxtrain.errors import ConfigError  # noqa: E402
from jaxtrain.hardware import xla_options  # noqa: E402
from jaxtrain.models.spec.checks import FP8_RECIPES  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Case:
    """One shape to time: `key` selects it (--cases), `experts` adds the expert block alone."""

    key: str
    name: str
    config: str
    overrides: tuple[str, ...]
    experts: bool = False


# Global batch x seq_len tokens per step, sized so weights, AdamW state (16 bytes a parameter),
# remat residuals and the float32 logits fit one 80 GB H100: `jaxtrain plan` puts each case at
# 46-67 GiB there (docs/performance.md#gpus). A case that fails (out of memory) is reported and
# the script goes on. The expert models are cut to about 3B parameters, their experts whole
# (dropless routing, the presets' default).
DENSE = (
    Case(
        "8b",
        "llama3-8b, 8 of 32 layers",
        "configs/llama3_8b.py",
        (
            "--config.model.num_layers=8",
            "--config.train.seq_len=8192",
            "--config.train.global_batch_size=2",
            "--config.model.remat=minimal",
        ),
    ),
    Case(
        "1b",
        "llama3.2-1b",
        "configs/llama3_2_1b.py",
        (
            "--config.train.seq_len=8192",
            "--config.train.global_batch_size=4",
            "--config.model.remat=minimal",
        ),
    ),
)
EXPERTS = (
    Case(
        "mixtral",
        "mixtral-8x7b, 2 of 32 layers",
        "configs/mixtral_8x7b.py",
        (
            "--config.model.num_layers=2",
            "--config.train.seq_len=4096",
            "--config.train.global_batch_size=4",
            "--config.model.remat=minimal",
        ),
        experts=True,
    ),
    Case(
        "qwen3-moe",
        "qwen3-30b-a3b, 4 of 48 layers",
        "configs/qwen3_30b_a3b.py",
        (
            "--config.model.num_layers=4",
            "--config.train.seq_len=4096",
            "--config.train.global_batch_size=4",
            "--config.model.remat=minimal",
        ),
        experts=True,
    ),
)
CASES = {case.key: case for case in DENSE + EXPERTS}

# The hosted pretraining walkthrough's run: Qwen3-0.6B, 1,024-token sequences, 64 a step, 300
# steps. Two micro batches of 32: `jaxtrain plan` puts them at 46 GiB on an H100, the whole
# batch at once at 79 GiB (its float32 [tokens, 151,936] logits), over an 80 GB GPU.
WALKTHROUGH = Case(
    "walkthrough",
    "qwen3-0.6b walkthrough",
    "configs/qwen3_0_6b.py",
    (
        "--config.train.seq_len=1024",
        "--config.train.global_batch_size=64",
        "--config.train.micro_batch_size=32",
        "--config.train.log_every=50",
    ),
)
WALKTHROUGH_STEPS = 300
# Small expert blocks for --smoke (the tiny shape keeps the presets' expert counts).
TINY_EXPERTS = ["--config.model.moe_intermediate_size=32"]


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
    parser.add_argument(
        "--fp8-recipes",
        default="delayed",
        help=f"comma-separated fp8 scaling recipes to time with --fp8 (of {', '.join(FP8_RECIPES)})",
    )
    parser.add_argument(
        "--moe", action="store_true", help="also time the expert models (and their expert block)"
    )
    parser.add_argument(
        "--cases",
        default="",
        help=f"comma-separated shapes to time, in this order (of {', '.join(CASES)}), and "
        f"{WALKTHROUGH.key} (run last); overrides --moe and --walkthrough",
    )
    parser.add_argument(
        "--walkthrough",
        action="store_true",
        help=f"then train {WALKTHROUGH.name} for {WALKTHROUGH_STEPS} steps: time to the last step",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        default="",
        help=f"then trace {bench.PROFILED_STEPS} more steps of each shape with the JAX profiler "
        "into DIR/<case>-<precision>",
    )
    parser.add_argument(
        "--xla",
        type=options.xla_option("--xla"),
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an XLA compiler option of every shape's program (backend.xla_options; "
        "repeatable), kept with each row",
    )
    parser.add_argument(
        "--compile-cache",
        metavar="DIR",
        default="",
        help="JAX's persistent compilation cache in DIR (backend.compile_cache): a rerun loads "
        "the programs compiled before; their rows are marked compile_cached",
    )
    parser.add_argument(
        "--record",
        default="",
        help="append each row to this file as a JSON line as soon as it is measured (a run cut "
        "short keeps its rows)",
    )
    args = parser.parse_args(argv)
    cases, walkthrough = _selected(args)
    precisions = ("bf16", *_fp8_precisions(args)) if args.fp8 else ("bf16",)
    try:  # options this XLA refuses would fail every shape: say so once, before any
        xla_options.check(dict(args.xla), "--xla")
    except ConfigError as error:
        parser.error(str(error))

    device = jax.devices()[0]
    print(
        f"device: {device.device_kind} ({device.platform}), {jax.device_count()} visible; "
        f"jax {jax.__version__}; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')}"
        + (f"; compile options {xla_options.text_of(dict(args.xla))}" if args.xla else ""),
        flush=True,
    )
    rows = []
    for case in cases:
        for precision in precisions:
            figures = _run(case, precision, args)
            if figures is not None:
                rows.append((case, precision, figures))
                _record(args.record, case.key, precision, figures)
    walked = None
    if walkthrough:
        walked = _walkthrough(args)
        if walked is not None:
            _record(args.record, WALKTHROUGH.key, "bf16", walked)

    if rows:
        _print_table(rows)
    if walked is not None:
        print(_walkthrough_line(walked))
    expected = len(cases) * len(precisions) + int(walkthrough)
    return 0 if len(rows) + int(walked is not None) == expected else 1


def _selected(args: argparse.Namespace) -> tuple[list[Case], bool]:
    """The shapes to time and whether to run the walkthrough: those --cases names (an unknown
    key exits naming the known ones), else the dense shapes, the expert models with --moe and
    the walkthrough with --walkthrough."""
    if not args.cases:
        return list(DENSE + (EXPERTS if args.moe else ())), args.walkthrough
    keys = [key.strip() for key in args.cases.split(",") if key.strip()]
    known = [*CASES, WALKTHROUGH.key]
    unknown = [key for key in keys if key not in known]
    if unknown:
        raise SystemExit(f"bench_gpu: --cases {', '.join(unknown)}: not one of {', '.join(known)}")
    return [CASES[key] for key in keys if key in CASES], WALKTHROUGH.key in keys


def _fp8_precisions(args: argparse.Namespace) -> list[str]:
    """`fp8-<recipe>` for each recipe --fp8-recipes names (an unknown one exits naming the
    known ones)."""
    recipes = [r.strip() for r in args.fp8_recipes.split(",") if r.strip()]
    unknown = [r for r in recipes if r not in FP8_RECIPES]
    if unknown or not recipes:
        raise SystemExit(
            f"bench_gpu: --fp8-recipes {args.fp8_recipes!r}: name one or more of "
            f"{', '.join(FP8_RECIPES)}"
        )
    return [f"fp8-{recipe}" for recipe in recipes]


def _print_table(rows: list[tuple[Case, str, dict]]) -> None:
    print(
        "\n| shape | matmuls | tokens/step | tokens/s | MFU | step ms | vs bf16 | compile s | "
        "params | expert block |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    bf16_step = {case.key: f["step_time_s"] for case, precision, f in rows if precision == "bf16"}
    for case, precision, f in rows:
        speedup = (
            f"{bf16_step[case.key] / f['step_time_s']:.2f}x"
            if precision.startswith("fp8") and case.key in bf16_step
            else ""
        )
        block = (
            f"{f['block_time_s'] * 1e3:.1f} ms, MFU {f['block_mfu']:.1%}, "
            f"{bench_experts.share_of_step(f):.0%} of the step"
            if "block_time_s" in f
            else ""
        )
        print(
            f"| {case.name} | {precision} | {f['tokens']:,} | {f['tokens_per_s']:,.0f} | "
            f"{f['mfu']:.1%} | {f['step_time_s'] * 1e3:.0f} | {speedup} | "
            f"{_compile_cell(f)} | {f['num_params'] / 1e9:.2f}B | {block} |"
        )


def _compile_cell(f: dict) -> str:
    """Compile seconds, marked when the program came from the compilation cache."""
    return f"{f['compile_s']:.0f}{' cached' if f.get('compile_cached') else ''}"


def _config(case: Case, precision: str, args: argparse.Namespace) -> Any:
    overrides = list(case.overrides)
    if args.compile_cache:
        overrides.append(f"--config.backend.compile_cache={args.compile_cache}")
    if args.xla:
        overrides.append(f"--config.backend.xla_options={xla_options.text_of(dict(args.xla))}")
    if args.smoke:
        overrides += bench.TINY_SHAPE + (TINY_EXPERTS if case.experts else [])
        if case is WALKTHROUGH:  # the tiny batch of 2 in micro batches of 1
            overrides.append("--config.train.micro_batch_size=1")
    if precision.startswith("fp8-"):
        recipe = precision.removeprefix("fp8-")
        overrides += ["--config.model.quantization=fp8", f"--config.model.fp8_recipe={recipe}"]
    if args.peak_tflops:
        overrides.append(f"--config.train.peak_flops={args.peak_tflops * 1e12}")
    return config_lib.load_config(str(REPO / case.config), overrides)


def _run(case: Case, precision: str, args: argparse.Namespace) -> dict | None:
    """One shape's figures in one precision, or None (printed) when it fails."""
    cfg = _config(case, precision, args)
    label = f"{case.name} ({precision})"
    traced = Path(args.profile) / f"{case.key}-{precision}" if args.profile else None
    start = time.perf_counter()
    try:
        figures = bench.benchmark(
            cfg,
            steps=args.steps,
            warmup=args.warmup,
            devices=jax.devices()[:1],
            experts=case.experts,
            profile_dir=traced,
        )
    except Exception as error:  # one shape failing (memory) must not hide the others
        _failed(label, start, error)
        return None
    print(bench.format_report(label, figures), flush=True)
    if case.experts:
        print(bench.expert_report(label, figures), flush=True)
    if traced:
        _print_trace_summary(label, traced)
    figures["tokens"] = cfg.train.global_batch_size * cfg.train.seq_len
    if cfg.model.quantization == "fp8":
        figures["fp8_recipe"] = cfg.model.fp8_recipe  # what the row measured, on file with it
    if cfg.backend.xla_options:
        figures["xla_options"] = cfg.backend.xla_options
    return figures


def _walkthrough(args: argparse.Namespace) -> dict | None:
    """The walkthrough's run through the trainer's own loop (synthetic tokens, no checkpoint):
    seconds from building the trainer to its last step, compile included, and the tokens/s and
    MFU of the last logged window."""
    cfg = _config(WALKTHROUGH, "bf16", args)
    steps = 5 if args.smoke else WALKTHROUGH_STEPS
    cfg.checkpoint.every = 0
    start = time.perf_counter()
    try:
        # One step more than run() trains, so reaching `steps` writes no final checkpoint.
        with bench.synthetic_trainer(cfg, steps + 1, jax.devices()[:1]) as trainer:
            built = time.perf_counter()
            last = trainer.run(steps)
            jax.block_until_ready(trainer.state)
            done = time.perf_counter()
            compile_s, num_params = trainer.compile_s, trainer.num_params
            compile_cached = trainer.compile_cached
    except Exception as error:
        _failed(WALKTHROUGH.name, start, error)
        return None
    figures = {
        "steps": float(steps),
        "time_to_last_step_s": done - start,
        "build_and_compile_s": built - start,
        "compile_s": compile_s,
        "compile_cached": compile_cached,
        "tokens_per_step": float(cfg.train.global_batch_size * cfg.train.seq_len),
        "tokens_per_s": last.get("tokens_per_s", float("nan")),
        "mfu": last.get("mfu", float("nan")),
        "loss": last.get("loss", float("nan")),
        "num_params": float(num_params),
    }
    if cfg.backend.xla_options:
        figures["xla_options"] = cfg.backend.xla_options
    print(_walkthrough_line(figures), flush=True)
    return figures


def _walkthrough_line(f: dict) -> str:
    return (
        f"{WALKTHROUGH.name}: step {int(f['steps'])} reached {f['time_to_last_step_s']:.0f} s "
        f"after start ({f['build_and_compile_s']:.0f} s to build and compile, compile "
        f"{_compile_cell(f)} s); last window {f['tokens_per_s']:,.0f} tokens/s, MFU "
        f"{f['mfu']:.1%}, {int(f['tokens_per_step']):,} tokens a step, loss {f['loss']:.3f}, "
        f"{f['num_params'] / 1e9:.2f}B params"
    )


def _print_trace_summary(label: str, traced: Path) -> None:
    """Where the traced steps' time went, per XLA op, into the log (the traces come back
    whole for XProf or Perfetto too)."""
    try:
        print(f"{label}, traced steps:\n{profile_command.summary_text(traced, top=15)}", flush=True)
    except Exception as error:  # a trace the summary cannot read must not stop the timings
        print(f"{label}: no summary of the trace in {traced} ({error})", flush=True)


def _failed(label: str, start: float, error: Exception) -> None:
    print(
        f"{label}: failed after {time.perf_counter() - start:.0f} s: "
        f"{type(error).__name__}: {str(error).splitlines()[0][:300]}",
        flush=True,
    )


def _record(path: str, key: str, precision: str, figures: dict) -> None:
    """Appends one row (JSON) to `path`, flushed, so rows survive a run that is killed."""
    if not path:
        return
    row = {"case": key, "precision": precision, "device": jax.devices()[0].device_kind}
    row.update({k: v for k, v in figures.items() if isinstance(v, (int, float, str))})
    with open(path, "a") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
