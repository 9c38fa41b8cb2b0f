"""`python -m jaxtrain plan`: pick the mesh, micro batch, remat and loss chunking for N devices.

    python -m jaxtrain plan --config configs/llama3_70b.py --devices 64 --hosts 8 \\
        --device-kind H100
    python -m jaxtrain plan --config primus_llama3.1_8B.yaml --devices 8 --device-kind MI300X \\
        --layout     # score the file's own layout the same way, for comparison

Enumerates the layouts the trainer accepts, guesses their memory, compiles the most promising
on N fake CPU devices (`jaxtrain.planning.planner`) and prints them best first with their
memory per device, predicted tokens/s and MFU (`jaxtrain.planning.cost`), or JSON (`--json`).
"""

from __future__ import annotations

import argparse
import json
import sys

from jaxtrain.commands.options import add_config_argument
from jaxtrain.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `plan`."""
    from jaxtrain.planning.hardware import KINDS

    add_config_argument(parser, required=True)
    parser.add_argument("--devices", type=int, required=True, help="devices to plan for")
    parser.add_argument("--hosts", type=int, default=1, help="hosts they are spread over")
    parser.add_argument(
        "--device-kind", default="H100", help=f"one of {', '.join(KINDS)} (default H100)"
    )
    parser.add_argument("--top", type=int, default=10, help="candidates to print")
    parser.add_argument(
        "--compile", type=int, default=8, dest="compile_top", help="candidates to compile"
    )
    parser.add_argument(
        "--layout",
        action="store_true",
        help="score the config's own mesh, micro batch, remat and loss chunks (after "
        "overrides) instead of searching: to compare a layout you already run",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--hardware", default="", help="JSON file replacing device figures")
    parser.add_argument("--intra-gbs", type=float, default=0.0, help="in-host bus GB/s")
    parser.add_argument("--inter-gbs", type=float, default=0.0, help="between-host bus GB/s")
    parser.add_argument("--cache-dir", default="", help="compiled figures (~/.cache/jaxtrain/plan)")


def _check(args: argparse.Namespace) -> None:
    if args.devices < 1:
        raise ConfigError(f"--devices {args.devices}: give a positive device count.")
    if args.hosts < 1 or args.devices % args.hosts:
        raise ConfigError(
            f"--devices {args.devices} is not divisible by --hosts {args.hosts}; every host "
            "has the same number of devices: pick hosts that divide the devices."
        )
    if args.top < 1 or args.compile_top < 1:
        raise ConfigError("--top and --compile take a positive count.")


def _table(ranked: list, top: int) -> str:
    head = (
        "| # | mesh | micro batch | remat | loss chunks | GiB/device | tokens/s | MFU | "
        "fits | why not first |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for i, r in enumerate(ranked[:top], 1):
        c, p = r.cand, r.prediction
        lines.append(
            f"| {i} | {c.describe_mesh()} | {c.micro_batch} | {c.remat} | {c.loss_chunks} | "
            f"{r.memory_bytes / 2**30:.1f} | {p.tokens_per_s:,.0f} | {p.mfu:.1%} | "
            f"{'yes' if r.fits else 'no'} | {r.reason} |"
        )
    return "\n".join(lines)


def _as_json(ranked: list, top: int) -> dict:
    return {
        "candidates": [
            {
                "overrides": r.cand.overrides(),
                "memory_per_device_gib": r.memory_bytes / 2**30,
                "cpu_compiled_gib": r.cpu_bytes / 2**30,
                "predicted_tokens_per_s": r.prediction.tokens_per_s,
                "predicted_mfu": r.prediction.mfu,
                "fits": r.fits,
                "reason": r.reason,
            }
            for r in ranked[:top]
        ]
    }


def handle(args: argparse.Namespace) -> int:
    """Plans and prints the candidates; returns the exit status."""
    import time

    from jaxtrain import compat
    from jaxtrain.planning import compile_worker, hardware, planner

    _check(args)
    kind = hardware.device_kind(
        args.device_kind, args.devices, args.hardware, args.intra_gbs, args.inter_gbs
    )
    start = time.perf_counter()
    cfg = compat.load_config_file(
        args.config,
        args.overrides,
        native_overrides=args.native,
        allow_unsupported=True,
        env=compile_worker.launch_env(args.devices, args.hosts),
    )
    ranked = planner.plan(
        cfg,
        args.config,
        args.overrides,
        kind,
        args.devices,
        args.hosts,
        compile_top=args.compile_top,
        cache_dir=args.cache_dir,
        given_only=args.layout,
        native_overrides=args.native,
    )
    if not ranked:
        raise ConfigError(
            f"no layout of {args.config} on {args.devices} devices over {args.hosts} hosts "
            f"passes the trainer's checks and may fit {kind.hbm_gib:.0f} GiB; try more "
            "devices, a smaller train.global_batch_size or train.seq_len."
        )
    if args.json:
        print(json.dumps(_as_json(ranked, args.top), indent=2))
    else:
        print(_table(ranked, args.top))
        if not args.layout:
            best = " ".join(ranked[0].cand.overrides())
            print(f"\nbest: python -m jaxtrain --config {args.config} {best}")
    print(f"plan: done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0
