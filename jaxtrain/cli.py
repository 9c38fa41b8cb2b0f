"""The command line: `python -m jaxtrain COMMAND ...`, one argparse tree; `--help` lists it.

`train` is the default command, so `python -m jaxtrain --config FILE` trains. Config overrides
are `--config.section.key=value` (or `--config.section.key value`); a foreign file (YAML, TOML,
JSON) also takes bare `key=value` overrides in its own terms. Each command is a module of
`jaxtrain.commands` holding its options (`add_arguments(parser)`) and its handler
(`handle(args) -> int`); this one builds the tree, imports only the module of the command it
runs, and reports every `JaxtrainError` as one line, `jaxtrain COMMAND: error: MESSAGE` (exit
status 2).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Collection
from types import ModuleType
from typing import Any

from jaxtrain.commands.options import split_overrides
from jaxtrain.parallel import native_log_filter

# Commands whose arguments may carry config overrides (`--config.a.b=v`, bare `key=value`).
_CONFIG_COMMANDS = ("train", "config", "bench", "preflight", "plan")

# name: one-line description; the command itself is the module `jaxtrain.commands.NAME`.
COMMANDS: dict[str, str] = {
    "train": "train from a config, resuming from the run's latest checkpoint (the default command)",
    "config": "print a config as it resolves, its parameter count and memory per device, "
    "and for a foreign file what became of every key",
    "sample": "continue a prompt with a run's checkpoint",
    "eval": "run lm-evaluation-harness tasks on a run's checkpoint or a Hugging Face folder",
    "runs": "summarise run directories: progress, metrics, checkpoints, ETA",
    "plot": "draw PNG figures of runs' metrics (needs the plot extra)",
    "checkpoints": "list a run's checkpoints, or verify them (--verify)",
    "export": "write a run's checkpoint as a Hugging Face model folder",
    "convert": "read a Hugging Face checkpoint, summarise it, optionally write it back",
    "bench": "time the train step of a config (tokens/s, MFU, compile time, memory)",
    "profile": "summarise a profiler trace: the time per step of each kind of XLA operation "
    "and of the slowest ones",
    "plan": "pick mesh sizes, micro batch, remat and loss chunking for N devices, from "
    "compiled programs and a cost model",
    "preflight": "check every host before training: devices, memory, collectives, checkpoint "
    "folder, data (start it as training is started)",
}


def command_module(name: str) -> ModuleType:
    """The module of command `name` (most import JAX, so only the one that runs is imported)."""
    return importlib.import_module(f"jaxtrain.commands.{name}")


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The whole command tree, with the options of `commands` (default: every command); the
    others list only their one-line help, and their modules are not imported."""
    parser = argparse.ArgumentParser(
        prog="jaxtrain",
        allow_abbrev=False,
        description="JAX-native pretraining for decoder-only language models.",
        epilog="`python -m jaxtrain --config FILE` trains (train is the default command). "
        "`python -m jaxtrain COMMAND --help` gives a command's options. Documentation: "
        "docs/index.md.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, summary in COMMANDS.items():
        sub = subparsers.add_parser(
            name,
            help=summary,
            description=summary[0].upper() + summary[1:] + ".",
            allow_abbrev=False,
        )
        if commands is None or name in commands:
            module = command_module(name)
            module.add_arguments(sub)
            sub.set_defaults(handler=module.handle)
    return parser


def parse(argv: list[str]) -> argparse.Namespace | None:
    """The namespace of a command line (None when only help was asked for)."""
    if not argv or argv[0] in ("help", "-h", "--help"):
        topic = argv[1:2]
        if topic and topic[0] in COMMANDS:
            build_parser(topic).parse_args([topic[0], "--help"])
        build_parser(()).print_help()
        return None
    if argv[0] not in COMMANDS:
        argv = ["train", *argv]
    overrides: list[str] = []
    native: list[str] = []
    if argv[0] in _CONFIG_COMMANDS:
        rest, overrides, native = split_overrides(argv[1:])
        argv = [argv[0], *rest]
    args = build_parser(argv[:1]).parse_args(argv)
    args.overrides, args.native = overrides, native
    return args


def _quiet_library_notices() -> None:
    """transformers announces at import that PyTorch is missing: true, and not our business."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _exit_now(status: int) -> None:
    """Ends the process at once, as a kill would, once its output is flushed.

    After an abort, a checkpoint save may still be writing on Orbax's threads: a normal exit
    would shut the interpreter down under them, and they would fail with tracebacks. Nothing is
    lost by not waiting: an unfinished save is a `.orbax-checkpoint-tmp` folder that the next
    start ignores, and metrics are written a whole line per system call.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    native_log_filter.finish()
    os._exit(status)


def main(argv: list[str] | None = None) -> int:
    """Runs one command line; returns its exit status."""
    real_process = argv is None
    if real_process:  # a real command line, which may restart with CPU malloc settings
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
        if real_process:
            _exit_now(130)
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
