"""`python -m jaxtrain convert`: read a Hugging Face checkpoint, summarise it, optionally write it back.

    python -m jaxtrain convert --from-hf IN                      # check it loads, print summary
    python -m jaxtrain convert --from-hf IN --to-hf OUT [--dtype bfloat16] [--max-shard-size 5GB]

Writing goes through the same code as exporting a trained model, then reads OUT back and checks
every tensor is identical, so a round trip exercises both directions of the mapping.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
from typing import Any

import numpy as np

from jaxtrain.commands.options import WEIGHT_DTYPES, check_output_folder, parse_size
from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf import TOKENIZER_FILES, load_hf_params, save_hf_checkpoint
from jaxtrain.interop.hf_config import hf_architecture, read_hf_config

# Config keys that describe the tokenizer rather than the weights, kept on a round trip.
_TOKEN_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _input_dtype(cfg: dict[str, Any]) -> str:
    dtype = cfg.get("dtype") or cfg.get("torch_dtype")
    return dtype if dtype in WEIGHT_DTYPES else "float32"


def convert(
    from_hf: str | pathlib.Path,
    to_hf: str | pathlib.Path | None = None,
    *,
    dtype: str | None = None,
    max_shard_bytes: int = 5 * 10**9,
) -> int:
    """Loads `from_hf`, prints a summary and, with `to_hf`, writes it back and checks that it
    reads identically; returns an exit status (1 when the copy differs)."""
    from_hf = pathlib.Path(from_hf)
    to_hf = pathlib.Path(to_hf) if to_hf is not None else None
    cfg, where = read_hf_config(from_hf)
    arch = hf_architecture(cfg, where)
    dtype = dtype or _input_dtype(cfg)
    spec, params = load_hf_params(from_hf, param_dtype=dtype)
    leaves = _leaves(params)
    count = sum(math.prod(x.shape) for x in leaves)
    print(
        f"{from_hf}: {arch} (family {spec.family}), {spec.num_layers} layers, "
        f"hidden {spec.hidden_size}, heads {spec.num_heads}/{spec.num_kv_heads} kv, "
        f"vocab {spec.vocab_size}, {count:,} parameters ({dtype})."
    )
    if count != spec.num_params():
        print(f"warning: the spec predicts {spec.num_params():,} parameters.", file=sys.stderr)
    if to_hf is None:
        return 0
    if to_hf.resolve() == from_hf.resolve():
        raise ConfigError("--to-hf must differ from --from-hf (its weights are replaced).")
    tokenizer = from_hf if any((from_hf / n).is_file() for n in TOKENIZER_FILES) else None
    extra = {k: cfg[k] for k in _TOKEN_KEYS if cfg.get(k) is not None}
    save_hf_checkpoint(
        spec,
        params,
        to_hf,
        tokenizer_dir=tokenizer,
        max_shard_bytes=max_shard_bytes,
        dtype=dtype,
        config_extra=extra,
    )
    _, again = load_hf_params(to_hf, spec)
    if not all(np.array_equal(a, b) for a, b in zip(leaves, _leaves(again), strict=True)):
        print(f"error: {to_hf} does not read back identically.", file=sys.stderr)
        return 1
    print(f"wrote {to_hf}; read back identically ({len(leaves)} arrays).")
    return 0


def _leaves(params: dict[str, Any]) -> list[np.ndarray]:
    """Arrays of a nested dict in a fixed (sorted key) order."""
    out: list[np.ndarray] = []
    for key in sorted(params):
        value = params[key]
        out.extend(_leaves(value) if isinstance(value, dict) else [value])
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `convert`: the folder to read, where to write it back, and how."""
    parser.add_argument(
        "--from-hf",
        required=True,
        metavar="IN",
        help="Hugging Face model folder (config.json + safetensors)",
    )
    parser.add_argument(
        "--to-hf",
        default=None,
        metavar="OUT",
        help="write the checkpoint back out here, then verify it reads identically",
    )
    parser.add_argument(
        "--dtype",
        choices=WEIGHT_DTYPES,
        help="stored weight dtype (default: the input config's, else float32)",
    )
    parser.add_argument(
        "--max-shard-size",
        type=parse_size,
        default=5 * 10**9,
        metavar="SIZE",
        help="largest safetensors shard, e.g. 5GB (default) or 500MB",
    )


def handle(args: argparse.Namespace) -> int:
    """Runs `convert` on the parsed options; returns the exit status."""
    if args.to_hf is not None:
        check_output_folder(args.to_hf, "--to-hf")  # before the weights are read
    return convert(args.from_hf, args.to_hf, dtype=args.dtype, max_shard_bytes=args.max_shard_size)
