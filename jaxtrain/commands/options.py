"""The options several commands share, and reading what they name.

`--config FILE` and its overrides (`--config.a.b=VALUE`, or a foreign file's bare `key=value`),
the options of a config from another stack, and sizes and weight dtypes of a written checkpoint.
The command line imports this module whatever it runs, `--help` included, so it stays light:
nothing here imports JAX until a config is read.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

from jaxtrain.errors import ConfigError
from jaxtrain.hardware import writable, xla_options

if TYPE_CHECKING:
    from ml_collections import ConfigDict

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
WEIGHT_DTYPES = ("float32", "bfloat16", "float16")


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


def at_least(minimum: int):
    """An argparse type: an integer of at least `minimum`, else a message naming the bound."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {minimum}.")
        return value

    return parse


def xla_option(option: str):
    """An argparse type: `NAME=VALUE` as a typed XLA compiler option
    (`hardware.xla_options.parse_item`), else its message naming `option`."""

    def parse(text: str) -> tuple[str, bool | int | float | str]:
        try:
            return xla_options.parse_item(text, option)
        except ConfigError as error:
            raise argparse.ArgumentTypeError(str(error)) from error

    return parse


def check_output_folder(path: str | Path, option: str) -> None:
    """ConfigError naming `option` when this process cannot write into the folder `path`,
    checked before any work and without creating it (`hardware.writable`)."""
    folder = Path(path)
    try:
        writable.probe(folder, create=False)
    except OSError as e:
        raise ConfigError(
            f"{option} {folder}: cannot write there ({e.strerror or e}); nothing was written. "
            "Choose a folder this process can write, or fix its permissions."
        ) from None


def add_config_argument(parser: argparse.ArgumentParser, required: bool) -> None:
    """`--config FILE`: a config by path or shipped name (overrides are split off beforehand)."""
    parser.add_argument(
        "--config",
        required=required,
        default=None,
        metavar="FILE",
        help="a config: a .py file, a preset by name (llama2_7b.py, "
        "llama2-7b) or a Primus/MaxText/TorchTitan/prime-rl/HF file; "
        "--config.a.b=VALUE overrides a key",
    )


def add_foreign_options(parser: argparse.ArgumentParser) -> None:
    """The options of a config from another stack: unsupported keys, Primus and MaxText roots."""
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


def load_run_config(
    path: str, args: argparse.Namespace, *, report_lines: bool = True
) -> ConfigDict:
    """The config of `path` with the command line's overrides; a foreign file's key report is
    printed (and its unsupported keys refused unless --allow-unsupported)."""
    from jaxtrain import compat  # imports JAX: only once a config is read

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
