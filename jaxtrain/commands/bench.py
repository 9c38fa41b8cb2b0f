"""Training-step benchmark: tokens/s, step time, achieved FLOP/s, MFU, compile time and memory.

Times the real jitted train step of any config on a fixed device-resident batch (so the data
pipeline is not measured; `tools/bench_loader.py` measures that), after warm-up steps.

    python -m jaxtrain bench --config configs/llama3_8b.py --steps 10 --config.model.num_layers=4

FLOPs per token are `ModelSpec.flops_per_token`: 6 x matmul parameters (output projection
included, embedding gather excluded) + 3 x causal attention (2 x 2 x layers x heads x head_dim x
seq_len / 2). MFU is `jaxtrain.train.throughput`, as the trainer logs it: achieved FLOP/s over
the mesh's peak, a data-sheet figure for known GPUs (their fp8 peak for
`model.quantization="fp8"`), `train.peak_flops` when set, or a matmul rate measured on
CPUs in the precision the matmuls take (bfloat16 where the CPU multiplies it in hardware).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
from ml_collections import ConfigDict

from jaxtrain import compat
from jaxtrain.commands import bench_experts
from jaxtrain.commands import profile as profile_command
from jaxtrain.commands.options import add_config_argument, at_least
from jaxtrain.rundir import profile
from jaxtrain.train import throughput

# Steps `--profile` traces after the timed ones: each its own, waited for before the next.
PROFILED_STEPS = 2

# A Llama shape any CPU trains in seconds: the GPU tools' `--smoke` runs (tools/bench_gpu.py,
# tools/gpu_parity.py) take it to check their code path anywhere.
TINY_SHAPE = [
    "--config.model.num_layers=1",
    "--config.model.hidden_size=64",
    "--config.model.num_heads=4",
    "--config.model.num_kv_heads=2",
    "--config.model.head_dim=16",
    "--config.model.intermediate_size=128",
    "--config.model.vocab_size=512",
    "--config.train.seq_len=64",
    "--config.train.global_batch_size=2",
]


def synthetic_batch(cfg: ConfigDict, vocab_size: int) -> dict[str, np.ndarray]:
    """This process's rows of a random batch of `cfg`'s shape (seeded by `run.seed`), every
    token counted in the loss: place it with `RunSetup.global_batch`."""
    rng = np.random.default_rng(cfg.run.seed)
    b, l = cfg.train.global_batch_size // jax.process_count(), cfg.train.seq_len
    tokens = rng.integers(0, vocab_size, (b, l + 1), dtype=np.int64).astype(np.int32)
    return {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "loss_mask": np.ones((b, l), np.float32),
    }


@contextlib.contextmanager
def synthetic_trainer(
    cfg: ConfigDict, steps: int, devices: list[Any] | None = None
) -> Iterator[Any]:
    """A Trainer of a copy of `cfg` on synthetic data, in a temporary run folder, for at least
    `steps` steps: no data preparation, evaluation or resume. Closed and removed on exit."""
    from jaxtrain.trainer import Trainer

    cfg = ConfigDict(cfg.to_dict())
    with tempfile.TemporaryDirectory() as run_dir:
        cfg.run.dir = run_dir
        cfg.data.kind = "synthetic"
        cfg.data.prepare = ""
        cfg.data.tokenizer = ""  # nothing to check shards against, no sample
        cfg.train.eval_every = 0
        cfg.checkpoint.resume = False
        cfg.train.steps = max(cfg.train.steps, steps)
        trainer = Trainer(cfg, devices=devices, console=False)
        try:
            yield trainer
        finally:
            trainer.close()


def benchmark(
    cfg: ConfigDict,
    steps: int = 10,
    warmup: int = 2,
    devices: list[Any] | None = None,
    experts: bool = False,
    profile_dir: str | Path | None = None,
) -> dict[str, float]:
    """Compiles and times `steps` train steps after `warmup` ones; returns the figures. With
    `profile_dir`, then traces `PROFILED_STEPS` more steps into it (`profile_steps`). With
    `experts`, then times one expert block alone (`bench_experts`) once the trainer's state is
    freed, and adds its figures (`block_*`, and `expert_blocks_per_step`)."""
    extra = PROFILED_STEPS if profile_dir else 0
    with synthetic_trainer(cfg, steps + warmup + extra + 1, devices) as trainer:
        if experts:
            bench_experts.require_experts(trainer.spec)
        figures = time_steps(trainer, steps, warmup)
        if profile_dir:
            profile_steps(trainer, Path(profile_dir), PROFILED_STEPS)
        spec, backend = trainer.spec, trainer.setup.backend
    del trainer
    if experts:
        gc.collect()  # the step's state and buffers leave the device before the block's come
        micro = cfg.train.micro_batch_size or cfg.train.global_batch_size
        one_device = throughput.for_run(cfg, spec, backend.bf16_products, 1)
        figures.update(
            bench_experts.time_expert_block(
                spec, backend, micro, cfg.train.seq_len, one_device.peak_flops, steps, warmup
            )
        )
        micro_batches = cfg.train.global_batch_size // micro
        figures["expert_blocks_per_step"] = float(spec.num_moe_layers * micro_batches)
    return figures


def time_steps(trainer: Any, steps: int, warmup: int) -> dict[str, float]:
    """Times `steps` train steps of an open trainer (`synthetic_trainer`) after `warmup`
    ones; returns the figures. Callable again on the same trainer, to interleave several."""
    cfg, spec = trainer.cfg, trainer.spec
    batch = device_batch(trainer)
    compiled, compile_s = trainer.compiled_step, trainer.compile_s
    state = trainer.state
    for _ in range(warmup):
        state, _ = compiled(state, batch)
    jax.block_until_ready(state)  # the timing starts with no step in flight (warmup may be 0)
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = compiled(state, batch)
    jax.block_until_ready(metrics)
    elapsed = time.perf_counter() - start
    trainer.state = state
    tokens = cfg.train.global_batch_size * cfg.train.seq_len * steps
    tokens_per_s = tokens / elapsed
    flops_per_token = spec.flops_per_token(cfg.train.seq_len)
    devices = trainer.mesh.devices.size
    run_peak = throughput.for_run(cfg, spec, trainer.setup.backend.bf16_products, devices)
    total_peak, peak_source = run_peak.peak_flops, run_peak.peak_source
    memory = compiled.memory_analysis()
    temp_bytes = float(getattr(memory, "temp_size_in_bytes", 0) or 0)
    return {
        "tokens_per_s": tokens_per_s,
        "step_time_s": elapsed / steps,
        "flops_per_token": flops_per_token,
        "achieved_flops_per_s": flops_per_token * tokens_per_s,
        "peak_flops_per_s": total_peak,
        "peak_source": peak_source,
        "mfu": flops_per_token * tokens_per_s / total_peak,
        "compile_s": compile_s,
        "compile_cached": trainer.compile_cached,  # loaded from backend.compile_cache
        "temp_memory_gb": temp_bytes / 1e9,
        "host_peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
        "num_params": float(trainer.num_params),
        "devices": float(devices),
    }


def device_batch(trainer: Any) -> Any:
    """The synthetic batch of an open trainer's config, placed on its mesh."""
    return trainer.setup.global_batch(synthetic_batch(trainer.cfg, trainer.spec.vocab_size))


def profile_steps(trainer: Any, directory: Path, steps: int) -> None:
    """A JAX profiler trace of `steps` train steps of an open trainer in `directory`
    (`plugins/profile/<time>/<host>.xplane.pb` and `.trace.json.gz`, for XProf, TensorBoard's
    profile plugin and Perfetto), each step annotated with its number, and the step's
    optimised program beside them (`profile.PROGRAM_FILE`, for `jaxtrain profile`'s FLOP
    rates). The Python tracer is off: it would fill the trace with the host loop's calls."""
    batch = device_batch(trainer)
    state = trainer.state
    directory.mkdir(parents=True, exist_ok=True)
    (directory / profile.PROGRAM_FILE).write_text(trainer.compiled_step.as_text())
    with jax.profiler.trace(str(directory), profiler_options=profile.trace_options()):
        for step in range(steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                state, metrics = trainer.compiled_step(state, batch)
            jax.block_until_ready(metrics)
    trainer.state = state


def format_report(name: str, figures: dict[str, Any]) -> str:
    """One readable block of figures."""
    f = figures
    cached = " (from the compilation cache)" if f.get("compile_cached") else ""
    return (
        f"{name}: {f['tokens_per_s']:,.0f} tokens/s, step {f['step_time_s'] * 1e3:.1f} ms, "
        f"{f['achieved_flops_per_s'] / 1e9:,.1f} GFLOP/s achieved, MFU {f['mfu']:.1%} of "
        f"{f['peak_flops_per_s'] / 1e9:,.1f} GFLOP/s ({f['peak_source']}), compile "
        f"{f['compile_s']:.1f} s{cached}, step temp memory {f['temp_memory_gb']:.2f} GB, "
        f"{f['num_params'] / 1e6:,.1f}M params on {int(f['devices'])} device(s)"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `bench`: the config and how many steps to time."""
    add_config_argument(parser, required=True)
    parser.add_argument("--steps", type=at_least(1), default=10, help="timed steps")
    parser.add_argument("--warmup", type=at_least(0), default=2, help="untimed steps first")
    parser.add_argument(
        "--profile",
        metavar="DIR",
        default="",
        help=f"then trace {PROFILED_STEPS} more steps with the JAX profiler into DIR (XProf, "
        "TensorBoard's profile plugin, Perfetto)",
    )
    parser.add_argument(
        "--experts",
        action="store_true",
        help="then time one expert block alone (forward + backward, one device) and its share "
        "of the step (expert models)",
    )


def handle(args: argparse.Namespace) -> int:
    """Times the config's train step and prints the figures; returns the exit status."""
    cfg = compat.load_config_file(
        args.config, args.overrides, native_overrides=args.native, allow_unsupported=True
    )
    figures = benchmark(
        cfg,
        steps=args.steps,
        warmup=args.warmup,
        experts=args.experts,
        profile_dir=args.profile or None,
    )
    print(format_report(cfg.run.name, figures))
    if args.profile:
        print(f"profile of {PROFILED_STEPS} more steps: {args.profile}")
        print(profile_command.summary_text(args.profile))
    if args.experts:
        print(expert_report(cfg.run.name, figures))
    return 0


def expert_report(name: str, figures: dict[str, Any]) -> str:
    """The expert block's line of a `benchmark(..., experts=True)`."""
    return bench_experts.format_report(name, figures)
