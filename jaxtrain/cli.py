"""The command line: `python -m jaxtrain COMMAND ...`, one argparse tree; `--help` lists it.

`train` is the default command, so `python -m jaxtrain --config FILE` trains. Config overrides
are `--config.section.key=value` (or `--config.section.key value`); a foreign file (YAML, TOML,
JSON) also takes bare `key=value` overrides in its own terms. The work lives in importable
modules; this one parses arguments and reports every `JaxtrainError` as one line,
`jaxtrain COMMAND: error: MESSAGE` (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

# Commands whose arguments may carry config overrides (`--config.a.b=v`, bare `key=value`).
_CONFIG_COMMANDS = ("train", "config", "bench")
_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_WEIGHT_DTYPES = ("float32", "bfloat16", "float16")


# ----------------------------------------------------------------------------- argument helpers
def split_overrides(argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(the other arguments, `--config.a.b=v` overrides, bare `key=value` overrides).

    `--config.a.b v` becomes `--config.a.b=v`; `--config FILE` stays for argparse.
    """
    rest, overrides, native = [], [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--config."):
            if "=" not in arg and i + 1 < len(argv):
                arg, i = f"{arg}={argv[i + 1]}", i + 1
            overrides.append(arg)
        elif "=" in arg and not arg.startswith("-"):
            native.append(arg)
        else:
            rest.append(arg)
        i += 1
    return rest, overrides, native


def parse_size(text: str) -> int:
    """Bytes from `5GB`, `500MiB` or a plain integer (decimal units, as transformers uses)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 5GB, 500MiB or 1000000.")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def _foreign_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("configs of other stacks (YAML/TOML/JSON)")
    group.add_argument(
        "--allow-unsupported",
        action="store_true",
        help="train although some source keys cannot be honoured (listed)",
    )
    group.add_argument(
        "--primus-root",
        default=None,
        metavar="DIR",
        help="a Primus checkout, for the presets an experiment file extends",
    )
    group.add_argument(
        "--maxtext-root",
        default=None,
        metavar="DIR",
        help="a MaxText checkout, for base.yml and the model files",
    )


def _config_argument(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument(
        "--config",
        required=required,
        default=None,
        metavar="FILE",
        help="a config: a .py file, a preset by name (llama2_7b.py, "
        "llama2-7b) or a Primus/MaxText/TorchTitan/prime-rl/HF file; "
        "--config.a.b=VALUE overrides a key",
    )


def load_run_config(path: str, args: argparse.Namespace, *, report_lines: bool = True):
    """The config of `path` with the command line's overrides; a foreign file's key report is
    printed (and its unsupported keys refused unless --allow-unsupported)."""
    from jaxtrain import compat

    if not compat.is_foreign(path):
        return compat.load_config_file(path, args.overrides, native_overrides=args.native)
    cfg, report = compat.load_foreign(
        path,
        args.overrides,
        native_overrides=args.native,
        allow_unsupported=args.allow_unsupported,
        primus_root=args.primus_root,
        maxtext_root=args.maxtext_root,
    )
    if report_lines:
        print(report.summary(), flush=True)
        for line in report.notes + [
            f"unsupported (allowed): {e.key}={e.value!r}: {e.reason}"
            for e in report.by_status("unsupported")
        ]:
            print(f"  {line}", flush=True)
    return cfg


# ----------------------------------------------------------------------------- commands
def _train_arguments(p: argparse.ArgumentParser) -> None:
    _config_argument(p, required=True)
    _foreign_options(p)
    group = p.add_argument_group(
        "several processes (without these, a launcher's environment is read: Slurm, torchrun, "
        "NNODES/NODE_RANK, OpenMPI; docs/parallelism.md)"
    )
    group.add_argument(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="process 0's address (env JAXTRAIN_COORDINATOR)",
    )
    group.add_argument(
        "--num-processes",
        type=int,
        default=None,
        help="processes in the job (env JAXTRAIN_NUM_PROCESSES)",
    )
    group.add_argument(
        "--process-id",
        type=int,
        default=None,
        help="this process, 0..N-1 (env JAXTRAIN_PROCESS_ID)",
    )
    group.add_argument(
        "--init-timeout",
        type=int,
        default=None,
        metavar="SECONDS",
        help="how long to wait for every process (env JAXTRAIN_INIT_TIMEOUT)",
    )


def _train(args: argparse.Namespace) -> int:
    from absl import flags

    from jaxtrain.parallel import distributed

    cfg = load_run_config(args.config, args)
    # grain's multiprocessing prefetch reads absl flags; mark them parsed.
    flags.FLAGS(sys.argv[:1], known_only=True)
    distributed.initialize_from_env(
        args.init_timeout,
        coordinator=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
    )

    from jaxtrain.trainer import train

    train(cfg)
    distributed.stop_watching()  # the work is done: the peers may see this process leave
    return 0


def _config_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", help="the config (as --config FILE)")
    _config_argument(p, required=False)
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object: config, derived, unsupported (a list of "
        "{key, value, reason, ...}) and, for a foreign file, report",
    )
    p.add_argument(
        "--devices",
        type=int,
        default=None,
        help="plan for this many devices in all (default: this host's, or what a "
        "foreign file's launcher settings give)",
    )
    p.add_argument(
        "--hosts",
        type=int,
        default=None,
        help="hosts (processes) the devices are spread over (dcn_* axes)",
    )
    p.add_argument("--list", action="store_true", help="list the configs jaxtrain ships")
    _foreign_options(p)


def _config(args: argparse.Namespace) -> int:
    from jaxtrain.commands import config as config_report
    from jaxtrain.config import loader as config_lib

    if args.list:
        print("\n".join(config_lib.preset_names()))
        return 0
    path = args.file or args.config
    if not path:
        raise config_lib.ConfigError("config: name a config file (or --list the shipped ones).")
    report = config_report.build(
        path,
        args.overrides,
        args.native,
        devices=args.devices,
        hosts=args.hosts,
        primus_root=args.primus_root,
        maxtext_root=args.maxtext_root,
    )
    print(json.dumps(report.to_json(), indent=2, default=str) if args.json else report.text())
    return 0


def _sample_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run directory")
    p.add_argument("--prompt", required=True)
    p.add_argument("--step", type=int, default=None, help="checkpoint step (latest)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    p.add_argument("--top-k", type=int, default=0, help="0: all tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokenizer", default="", help="tokenizer folder (the run's by default)")


def _sample(args: argparse.Namespace) -> int:
    from jaxtrain.checkpoint.saved_run import load_model
    from jaxtrain.errors import ConfigError
    from jaxtrain.models.generation import complete, load_tokenizer

    model, cfg, step = load_model(args.run, args.step)
    tokenizer_dir = args.tokenizer or cfg.data.tokenizer
    if not tokenizer_dir:
        raise ConfigError(
            f"the run {args.run} names no tokenizer (data.tokenizer); pass --tokenizer DIR."
        )
    text = complete(
        model,
        load_tokenizer(tokenizer_dir),
        args.prompt,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        seed=args.seed,
    )
    print(f"[step {step}] {args.prompt}{text}")
    return 0


def _convert_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from-hf",
        required=True,
        metavar="IN",
        help="Hugging Face model folder (config.json + safetensors)",
    )
    p.add_argument(
        "--to-hf",
        default=None,
        metavar="OUT",
        help="write the checkpoint back out here, then verify it reads identically",
    )
    p.add_argument(
        "--dtype",
        choices=_WEIGHT_DTYPES,
        help="stored weight dtype (default: the input config's, else float32)",
    )
    p.add_argument(
        "--max-shard-size",
        type=parse_size,
        default=5 * 10**9,
        metavar="SIZE",
        help="largest safetensors shard, e.g. 5GB (default) or 500MB",
    )


def _convert(args: argparse.Namespace) -> int:
    from jaxtrain.commands.convert import convert

    return convert(args.from_hf, args.to_hf, dtype=args.dtype, max_shard_bytes=args.max_shard_size)


def _bench_arguments(p: argparse.ArgumentParser) -> None:
    _config_argument(p, required=True)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")


def _bench(args: argparse.Namespace) -> int:
    from jaxtrain import compat
    from jaxtrain.commands.bench import benchmark, format_report

    cfg = compat.load_config_file(
        args.config, args.overrides, native_overrides=args.native, allow_unsupported=True
    )
    print(format_report(cfg.run.name, benchmark(cfg, steps=args.steps, warmup=args.warmup)))
    return 0


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run directory")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (latest)")
    p.add_argument(
        "--to",
        nargs=2,
        required=True,
        metavar=("FORMAT", "OUT"),
        help="format (hf) and output folder",
    )
    p.add_argument(
        "--dtype",
        choices=_WEIGHT_DTYPES,
        default=None,
        help="stored weight dtype (default: the run's model.param_dtype)",
    )
    p.add_argument(
        "--max-shard-size",
        type=parse_size,
        default=5 * 10**9,
        metavar="SIZE",
        help="largest safetensors file, e.g. 5GB (default) or 500MB",
    )


def _export(args: argparse.Namespace) -> int:
    from jaxtrain.commands.export import FORMATS, export_hf
    from jaxtrain.errors import ConfigError

    fmt, out = args.to
    if fmt not in FORMATS:
        raise ConfigError(f"--to {fmt}: unknown format; known: {', '.join(FORMATS)}.")
    export_hf(args.run, out, args.step, dtype=args.dtype, max_shard_bytes=args.max_shard_size)
    return 0


def _checkpoints_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory or checkpoint folder")
    p.add_argument(
        "--verify",
        action="store_true",
        help="read every array of every step (newest first) and check it; exit "
        "status 1 when any step is damaged",
    )
    p.add_argument(
        "--step", type=int, default=None, help="verify only this step (default: every step)"
    )


def _checkpoints(args: argparse.Namespace) -> int:
    from jaxtrain.commands import checkpoints as checkpoint_listing

    print(
        checkpoint_listing.format_listing(*checkpoint_listing.list_checkpoints(args.run)),
        flush=True,
    )
    if not args.verify:
        return 0
    damaged = 0
    for result in checkpoint_listing.verify_steps(args.run, args.step):
        print(result, flush=True)
        damaged += not result.ok
    if damaged:
        print(f"{damaged} damaged step(s)", flush=True)
    return 1 if damaged else 0


def _plot_arguments(p: argparse.ArgumentParser) -> None:
    from jaxtrain.commands.plot import FIGURES

    p.add_argument("runs", nargs="+", help="run directories (holding metrics.jsonl)")
    p.add_argument(
        "--out",
        default=None,
        help="folder for the PNGs (default: RUN/plots, or plots/ for several)",
    )
    p.add_argument(
        "--only", nargs="+", choices=sorted(FIGURES), default=None, help="draw only these figures"
    )


def _plot(args: argparse.Namespace) -> int:
    from jaxtrain.errors import ConfigError

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError(
            "plot needs matplotlib: pip install 'jaxtrain[plot]' (or "
            "pip install -e '.[plot]' in a clone)."
        ) from None
    from jaxtrain.commands.plot import FIGURES, plot_runs

    files = plot_runs(args.runs, args.out, tuple(args.only or FIGURES))
    for f in files:
        print(f)
    if not files:
        print("no metrics to plot yet", flush=True)
    return 0


def _runs_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", help="run directories")


def _runs(args: argparse.Namespace) -> int:
    from jaxtrain.commands.runs import build_report, format_report

    print("\n\n".join(format_report(build_report(d)) for d in args.runs))
    return 0


# name: (one-line description, arguments, handler)
COMMANDS: dict[
    str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = {
    "train": (
        "train from a config, resuming from the run's latest checkpoint (the default command)",
        _train_arguments,
        _train,
    ),
    "config": (
        "print a config as it resolves, its parameter count and memory per device, "
        "and for a foreign file what became of every key",
        _config_arguments,
        _config,
    ),
    "sample": ("continue a prompt with a run's checkpoint", _sample_arguments, _sample),
    "runs": (
        "summarise run directories: progress, metrics, checkpoints, ETA",
        _runs_arguments,
        _runs,
    ),
    "plot": ("draw PNG figures of runs' metrics (needs the plot extra)", _plot_arguments, _plot),
    "checkpoints": (
        "list a run's checkpoints, or verify them (--verify)",
        _checkpoints_arguments,
        _checkpoints,
    ),
    "export": (
        "write a run's checkpoint as a Hugging Face model folder",
        _export_arguments,
        _export,
    ),
    "convert": (
        "read a Hugging Face checkpoint, summarise it, optionally write it back",
        _convert_arguments,
        _convert,
    ),
    "bench": (
        "time the train step of a config (tokens/s, MFU, compile time, memory)",
        _bench_arguments,
        _bench,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree."""
    parser = argparse.ArgumentParser(
        prog="jaxtrain",
        allow_abbrev=False,
        description="JAX-native pretraining for decoder-only language models.",
        epilog="`python -m jaxtrain --config FILE` trains (train is the default command). "
        "`python -m jaxtrain COMMAND --help` gives a command's options. Documentation: "
        "docs/index.md.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, (summary, arguments, handler) in COMMANDS.items():
        sub = commands.add_parser(
            name,
            help=summary,
            description=summary[0].upper() + summary[1:] + ".",
            allow_abbrev=False,
        )
        arguments(sub)
        sub.set_defaults(handler=handler)
    return parser


def parse(argv: list[str]) -> argparse.Namespace | None:
    """The namespace of a command line (None when only help was asked for)."""
    parser = build_parser()
    if not argv or argv[0] in ("help", "-h", "--help"):
        topic = argv[1:2]
        if topic and topic[0] in COMMANDS:
            parser.parse_args([topic[0], "--help"])
        parser.print_help()
        return None
    if argv[0] not in COMMANDS:
        argv = ["train", *argv]
    overrides: list[str] = []
    native: list[str] = []
    if argv[0] in _CONFIG_COMMANDS:
        rest, overrides, native = split_overrides(argv[1:])
        argv = [argv[0], *rest]
    args = parser.parse_args(argv)
    args.overrides, args.native = overrides, native
    return args


def _quiet_library_notices() -> None:
    """transformers announces at import that PyTorch is missing: true, and not our business."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main(argv: list[str] | None = None) -> int:
    """Runs one command line; returns its exit status."""
    if argv is None:  # a real command line, which may restart with CPU malloc settings
        from jaxtrain.hardware.host_malloc import reexec_with_tuned_malloc

        reexec_with_tuned_malloc()
    argv = list(sys.argv[1:] if argv is None else argv)
    _quiet_library_notices()
    args = parse(argv)
    if args is None:
        return 0 if argv else 2
    from jaxtrain.errors import JaxtrainError
    from jaxtrain.parallel import distributed

    # In a multi-process run every failure also tells the other processes, which would otherwise
    # wait for this one in a collective (`abandon` exits; it returns in a one-process run).
    try:
        return args.handler(args)
    except (JaxtrainError, FileNotFoundError) as e:
        print(f"jaxtrain {args.command}: error: {e}", file=sys.stderr)
        distributed.abandon(2)
        return 2
    except KeyboardInterrupt as e:  # a second SIGINT/SIGTERM: stop now, without a checkpoint
        print(
            f"jaxtrain {args.command}: aborted ({e or 'interrupted'}); the last complete "
            "checkpoint is intact.",
            file=sys.stderr,
        )
        distributed.abandon(130)
        return 130
    except Exception as e:
        import traceback

        distributed.explain_runtime_error(e)  # exits naming a lost peer, if one was lost
        traceback.print_exc()
        distributed.abandon(1)
        raise


def run() -> Any:
    """Console-script entry point."""
    raise SystemExit(main())
