"""Step time of pipeline layouts against FSDP on fake CPU devices: what the schedule costs.

    python tools/bench_pipeline.py --devices 8 --steps 5
    python tools/bench_pipeline.py --config configs/llama_debug.py --config.model.num_layers=16

Every layout trains the same model on the same batch (`jaxtrain.commands.bench`, synthetic tokens,
warm-up steps excluded). Fake CPU devices share the host's cores, so a pipeline cannot be faster
here: each iteration every stage computes, idle ones on placeholder activations, and the step
takes about (R M + S - 1) / (R M) times the work of an FSDP step, plus the loop's overhead.
The table prints that factor beside the measured one; on real devices the stages run in
parallel and the same factor is the share of time lost to the bubble. Prints a Markdown table.
"""

from __future__ import annotations

import os
import sys

# Runs from a clone without installing: the repository (holding jaxtrain/) is importable.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import re  # noqa: E402

# (mesh sizes, train.pipeline_microbatches, train.pipeline_repeats); the first is the baseline.
LAYOUTS = (
    ({"ici_fsdp": 8}, 0, 1),
    ({"ici_pipeline": 2, "ici_fsdp": 4}, 2, 1),
    ({"ici_pipeline": 2, "ici_fsdp": 4}, 8, 1),
    ({"ici_pipeline": 4, "ici_fsdp": 2}, 4, 1),
    ({"ici_pipeline": 4, "ici_fsdp": 2}, 16, 1),
    ({"ici_pipeline": 4, "ici_fsdp": 2}, 4, 2),
    ({"ici_pipeline": 8}, 8, 1),
    ({"ici_pipeline": 8}, 32, 1),
)
# A model big enough for compute to outweigh the loop's overhead, small enough for two cores.
DEFAULTS = {
    "model.num_layers": 8,
    "model.hidden_size": 128,
    "model.num_heads": 8,
    "model.num_kv_heads": 4,
    "model.head_dim": 16,
    "model.intermediate_size": 512,
    "train.seq_len": 128,
    "train.global_batch_size": 64,
    "train.micro_batch_size": 0,
}


def _set_device_count(devices: int) -> None:
    """Asks XLA for `devices` CPU devices; must run before jax is imported."""
    flags = re.sub(
        r"--xla_force_host_platform_device_count=\S+", "", os.environ.get("XLA_FLAGS", "")
    )
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main(argv: list[str]) -> int:
    """Parses arguments, times every layout and prints the table."""
    from jaxtrain.commands.options import split_overrides

    rest, overrides, _ = split_overrides(argv)
    parser = argparse.ArgumentParser(prog="bench_pipeline.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--config",
        default="configs/llama_debug.py",
        metavar="FILE",
        help="the config (--config.a.b=VALUE overrides a key)",
    )
    parser.add_argument("--devices", type=int, default=8, help="fake CPU devices (default 8)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per layout")
    args = parser.parse_args(rest)
    _set_device_count(args.devices)

    import jax

    from jaxtrain import compat
    from jaxtrain.commands import bench
    from jaxtrain.config.loader import micro_batch_size
    from jaxtrain.models.assembly.pipeline import bubble_fraction

    if jax.device_count() != args.devices:
        print(
            f"bench_pipeline: asked for {args.devices} devices, jax has {jax.device_count()}",
            file=sys.stderr,
        )
        return 2
    rows, baseline = [], None
    for sizes, micro, repeats in LAYOUTS:
        if max(sizes.values()) > args.devices:
            continue
        values = dict(DEFAULTS)
        values.update(
            {
                f"mesh.{side}_{a}": 1
                for a in ("data", "pipeline", "fsdp", "context", "expert", "tensor")
                for side in ("ici", "dcn")
            }
        )
        values.update({f"mesh.{k}": v for k, v in sizes.items()})
        values.update({"train.pipeline_microbatches": micro, "train.pipeline_repeats": repeats})
        cfg = compat.load_config_file(
            args.config, [f"{k}={v}" for k, v in values.items()] + overrides
        )
        figures = bench.benchmark(cfg, steps=args.steps)
        stages = sizes.get("ici_pipeline", 1)
        bubble = bubble_fraction(stages, micro, repeats) if stages > 1 else 0.0
        baseline = baseline or figures["step_time_s"]
        mesh = " x ".join(f"{k.removeprefix('ici_')}={v}" for k, v in sizes.items())
        rows.append(
            f"| {mesh} | {micro or '-'} | {repeats} | {bubble:.1%} | "
            f"{figures['step_time_s']:.3f} s | {figures['step_time_s'] / baseline:.2f} | "
            f"{1 / (1 - bubble):.2f} | {figures['compile_s']:.0f} s |"
        )
        print(rows[-1], file=sys.stderr, flush=True)
    micro = micro_batch_size(cfg)
    print(
        f"{cfg.model.num_layers} blocks, hidden {cfg.model.hidden_size}, micro batch {micro} "
        f"x {cfg.train.seq_len} tokens, {args.devices} fake CPU devices on "
        f"{os.cpu_count()} cores, {args.steps} timed steps\n"
    )
    print(
        "| mesh | micro batches | repeats | bubble | step time | vs first | (RM+S-1)/RM | compile |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
