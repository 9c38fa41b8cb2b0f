"""XLA compiler options of a run's programs, from the config's `backend.xla_options`.

The options are the ones XLA_FLAGS sets (`xla_gpu_enable_latency_hiding_scheduler`,
`xla_cpu_prefer_vector_width`, ...), given to the train and eval steps' compilation
(`jax.jit(compiler_options=...)`) instead of the process's environment: they then hold in a
notebook or under a launcher that sets its own XLA_FLAGS, apply to this run's programs only,
and are recorded with the run's config.

The text is `NAME=VALUE` items separated by commas or spaces, each name with or without the
leading `--` of XLA_FLAGS, so a line of XLA_FLAGS can be pasted in; only enum values differ,
which compile options take by their full name in xla.proto (`LIBRARY_FUSION_TYPE_DOT` for
XLA_FLAGS' `dot`). XLA parses each option as its declared type and refuses a string for a
number or a flag, so values are typed here: true/false as flags, integers, decimals, and
anything else as text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError

KEY = "backend.xla_options"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def parse(text: str, key: str = KEY) -> dict[str, bool | int | float | str]:
    """The options of `text` by name, the last of a repeated name winning (as in XLA_FLAGS).

    A comma ends an item only where a `NAME=` follows it: the values of XLA's list options keep
    theirs (`xla_gpu_enable_command_buffer=FUSION,CUBLAS`).
    """
    items: list[str] = []
    for piece in re.split(r"[,\s]+", (text or "").strip()):
        if not piece:
            continue
        if "=" not in piece and items:
            items[-1] += f",{piece}"
        else:
            items.append(piece)
    return dict(parse_item(item, key) for item in items)


def parse_item(item: str, key: str = KEY) -> tuple[str, bool | int | float | str]:
    """One `NAME=VALUE` (or `--NAME=VALUE`) as a name and a typed value."""
    name, sep, value = item.removeprefix("--").partition("=")
    if not sep or not _NAME.match(name):
        raise ConfigError(
            f"{key}: {item!r} is not NAME=VALUE; give XLA options as "
            "'xla_gpu_enable_latency_hiding_scheduler=true,xla_gpu_autotune_level=4'."
        )
    return name, typed(value)


def typed(value: str) -> bool | int | float | str:
    """true/false, an integer, a decimal, or the text itself."""
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def text_of(options: Mapping[str, Any]) -> str:
    """`options` as the config's text, which `parse` reads back."""
    return ",".join(
        f"{name}={str(v).lower() if isinstance(v, bool) else v}" for name, v in options.items()
    )


def check(options: Mapping[str, Any], key: str = KEY) -> None:
    """Refuses options this XLA does not have, or values of the wrong type, by compiling an
    empty program with them (milliseconds), before a run builds anything that takes long."""
    if not options:
        return
    import jax

    try:
        jax.jit(lambda: 0, compiler_options=dict(options)).lower().compile()
    except Exception as error:  # XLA names the option and what is wrong with it
        words = str(error).rstrip(". ")
        hint = (
            " Enum options take the value's full name in xla.proto here (e.g. "
            "LIBRARY_FUSION_TYPE_DOT, where XLA_FLAGS takes dot), or its number."
            if "not a valid enum value" in words
            else ""
        )
        where = f" (--config.{key}=...; '' for none)" if key == KEY else ""
        raise ConfigError(
            f"{key}={text_of(options)!r}: XLA refused it: {words}.{hint} Correct or drop the "
            f"option{where}."
        ) from error
