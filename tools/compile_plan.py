"""Compile a config's real train step for a target mesh on fake CPU devices, allocating nothing.

    python tools/compile_plan.py --config configs/llama2_7b.py --devices 8 --layers 2,4 \\
        --config.mesh.ici_fsdp=8 --config.train.global_batch_size=8 --config.train.seq_len=4096
    python tools/compile_plan.py --config configs/llama3_70b.py --devices 64 --layers 2,4 \\
        --config.mesh.ici_fsdp=8 --config.mesh.ici_tensor=8 --config.train.micro_batch_size=8

Prints per-device memory (arguments, outputs, scratch, generated code), FLOPs per step (XLA's
count and jaxtrain's formula) and the collectives in the optimised HLO, as a Markdown table.
`--layers a,b` compiles at two depths and extends the figures linearly to the config's depth
(layers are scanned, so both are affine in depth); `--hosts N` folds the `dcn_*` sizes into the
one-process mesh as if N hosts shared the devices. `--json` prints the figures as JSON.
"""

import os
import sys

# Runs from a clone without installing: the repository (holding jaxtrain/) is importable.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402


def _set_device_count(devices: int) -> None:
    """Asks XLA for `devices` CPU devices; must run before jax is imported."""
    flags = re.sub(
        r"--xla_force_host_platform_device_count=\S+", "", os.environ.get("XLA_FLAGS", "")
    )
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main(argv: list[str]) -> int:
    """Parses arguments, sets the device count, compiles and prints the plan."""
    from jaxtrain.commands.options import split_overrides

    rest, overrides, _ = split_overrides(argv)
    parser = argparse.ArgumentParser(prog="compile_plan.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--config",
        required=True,
        metavar="FILE",
        help="the config (--config.a.b=VALUE overrides a key)",
    )
    parser.add_argument("--devices", type=int, default=8, help="fake CPU devices (default 8)")
    parser.add_argument(
        "--hosts",
        type=int,
        default=1,
        help="hosts the devices stand for; dcn_* sizes span them (default 1)",
    )
    parser.add_argument(
        "--layers", default="", help="two depths to compile and extrapolate from, e.g. 2,4"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(rest)
    path = args.config
    _set_device_count(args.devices)

    import jax

    from jaxtrain import compat
    from jaxtrain.errors import ConfigError
    from jaxtrain.parallel.sharding import MeshError
    from jaxtrain.planning import compile as compile_plan

    if jax.device_count() != args.devices:
        print(
            f"compile_plan: asked for {args.devices} devices, jax has {jax.device_count()} "
            "(was jax imported before XLA_FLAGS was set?)",
            file=sys.stderr,
        )
        return 2
    try:
        cfg = compat.load_config_file(path, overrides, allow_unsupported=True)
        layers = [int(x) for x in args.layers.split(",") if x.strip()]
        result, measured = compile_plan.plan(cfg, layers, hosts=args.hosts)
    except (ConfigError, MeshError) as e:
        print(f"compile_plan: error: {e}", file=sys.stderr)
        return 2
    name = os.path.splitext(os.path.basename(path.partition(":")[0]))[0]
    if args.json:
        print(
            json.dumps(
                {
                    "config": name,
                    "plan": dataclasses.asdict(result),
                    "peak_bytes": result.peak_bytes,
                    "compiled": [dataclasses.asdict(p) for p in measured],
                },
                indent=2,
            )
        )
    else:
        print(compile_plan.format_plan(name, result, measured))
        print(
            f"\ncompile time {sum(p.compile_s for p in measured):.0f} s; "
            "memory is per device, FLOPs per device per step."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
