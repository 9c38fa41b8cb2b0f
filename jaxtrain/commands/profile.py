"""Where a traced step's time goes: `python -m jaxtrain profile PATH [--hlo FILE] [--top N]`.

PATH is a profiler trace (`<host>.trace.json.gz`) or a folder holding some (a run directory
traced with `train.profile_start`, a `bench --profile` folder): the newest is read. It prints
the time per step of each kind of XLA operation and of the slowest operations, and how long
at least one ran (`jaxtrain.rundir.trace_ops`).

With the traced program's optimised HLO text, the products also get their FLOP rate: the
`program.hlo.txt` saved with the traces (in a `bench --profile` folder, in a run directory's
`profile/`), read when PATH is that folder, or `--hlo FILE` (XLA's `--xla_dump_to` writes it
as `*after_optimizations.txt`). `bench --profile DIR` prints the same summary.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from jaxtrain.errors import ConfigError
from jaxtrain.planning import hlo_flops, hlo_text
from jaxtrain.rundir import trace_ops


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `profile`: the trace, the program, how many rows."""
    parser.add_argument("path", help="a *.trace.json.gz file, or a folder holding traces")
    parser.add_argument(
        "--hlo",
        metavar="FILE",
        default="",
        help="the traced program's optimised HLO text, for the products' FLOP rates",
    )
    parser.add_argument("--top", type=int, default=20, help="rows per table (default 20)")


def summary_text(path: str | Path, hlo: str = "", top: int = 20) -> str:
    """The printed summary of the trace at `path`, with the rates of the products of `hlo`,
    or of the program saved with the traces in the folder `path`."""
    hlo = hlo or trace_ops.saved_program(path)
    return trace_ops.format_summary(trace_ops.summarise(path, program_facts(hlo)), top)


def program_facts(hlo: str) -> trace_ops.Program | None:
    """What an optimised HLO text says of its ops, for the summary (None for no text)."""
    if not hlo:
        return None
    return trace_ops.Program(
        hlo_flops.module_name(hlo), hlo_flops.op_flops(hlo), hlo_text.result_types(hlo)
    )


def handle(args: argparse.Namespace) -> int:
    """Prints the summary; returns the exit status."""
    hlo = ""
    if args.hlo:
        try:
            hlo = Path(args.hlo).read_text()
        except OSError as error:
            raise ConfigError(f"--hlo {args.hlo}: {error.strerror or error}") from error
        if not hlo_flops.module_name(hlo):
            raise ConfigError(f"--hlo {args.hlo} is not HLO text (no `HloModule` line)")
    print(summary_text(args.path, hlo, args.top))
    return 0
