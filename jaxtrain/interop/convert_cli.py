"""`jaxtrain convert`: read a Hugging Face checkpoint, summarise it, optionally write it back.

    python -m jaxtrain convert --from-hf IN                      # check it loads, print summary
    python -m jaxtrain convert --from-hf IN --to-hf OUT [--dtype bfloat16] [--max-shard-size 5GB]

Writing goes through the same code as exporting a trained model, then reads OUT back and checks
every tensor is identical, so a round trip exercises both directions of the mapping.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import re
import sys
from typing import Any

import numpy as np

from jaxtrain.interop.hf import TOKENIZER_FILES, load_hf_params, save_hf_checkpoint
from jaxtrain.interop.hf_config import hf_architecture, read_hf_config
from jaxtrain.models.spec import ConfigError

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
# Config keys that describe the tokenizer rather than the weights, kept on a round trip.
_TOKEN_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")
_DTYPE_NAMES = ("float32", "bfloat16", "float16")


def parse_size(text: str) -> int:
    """Bytes from `5GB`, `500MiB` or a plain integer (decimal units, as transformers uses)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if not match or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 5GB, 500MiB or 1000000.")
    return int(float(match.group(1)) * _UNITS[unit])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jaxtrain convert", description=__doc__.split("\n")[0])
    p.add_argument("--from-hf", required=True, type=pathlib.Path, metavar="IN",
                   help="Hugging Face model folder (config.json + safetensors).")
    p.add_argument("--to-hf", type=pathlib.Path, metavar="OUT",
                   help="write the checkpoint back out here, then verify it reads identically.")
    p.add_argument("--dtype", choices=_DTYPE_NAMES,
                   help="stored weight dtype (default: the input config's, else float32).")
    p.add_argument("--max-shard-size", type=parse_size, default=5 * 10**9, metavar="SIZE",
                   help="largest safetensors shard, e.g. 5GB (default) or 500MB.")
    return p


def _input_dtype(cfg: dict[str, Any]) -> str:
    dtype = cfg.get("dtype") or cfg.get("torch_dtype")
    return dtype if dtype in _DTYPE_NAMES else "float32"


def convert_main(argv: list[str]) -> int:
    """Runs `jaxtrain convert` with the arguments after the subcommand; returns an exit code."""
    if argv[:1] == ["convert"]:
        argv = argv[1:]  # tolerate being handed the subcommand name too
    args = _parser().parse_args(argv)
    try:
        cfg, where = read_hf_config(args.from_hf)
        arch = hf_architecture(cfg, where)
        dtype = args.dtype or _input_dtype(cfg)
        spec, params = load_hf_params(args.from_hf, param_dtype=dtype)
        leaves = _leaves(params)
        count = sum(math.prod(x.shape) for x in leaves)
        print(f"{args.from_hf}: {arch} (family {spec.family}), {spec.num_layers} layers, "
              f"hidden {spec.hidden_size}, heads {spec.num_heads}/{spec.num_kv_heads} kv, "
              f"vocab {spec.vocab_size}, {count:,} parameters ({dtype}).")
        if count != spec.num_params():
            print(f"warning: the spec predicts {spec.num_params():,} parameters.", file=sys.stderr)
        if args.to_hf is None:
            return 0
        if args.to_hf.resolve() == args.from_hf.resolve():
            raise ConfigError("--to-hf must differ from --from-hf (its weights are replaced).")
        tokenizer = args.from_hf if any((args.from_hf / n).is_file()
                                        for n in TOKENIZER_FILES) else None
        extra = {k: cfg[k] for k in _TOKEN_KEYS if cfg.get(k) is not None}
        save_hf_checkpoint(spec, params, args.to_hf, tokenizer_dir=tokenizer,
                           max_shard_bytes=args.max_shard_size, dtype=dtype, config_extra=extra)
        _, again = load_hf_params(args.to_hf, spec)
        same = all(np.array_equal(a, b) for a, b in zip(leaves, _leaves(again), strict=True))
        if not same:
            print(f"error: {args.to_hf} does not read back identically.", file=sys.stderr)
            return 1
        print(f"wrote {args.to_hf}; read back identically ({len(leaves)} arrays).")
        return 0
    except (ConfigError, OSError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _leaves(params: dict[str, Any]) -> list[np.ndarray]:
    """Arrays of a nested dict in a fixed (sorted key) order."""
    out: list[np.ndarray] = []
    for key in sorted(params):
        value = params[key]
        out.extend(_leaves(value) if isinstance(value, dict) else [value])
    return out


if __name__ == "__main__":
    sys.exit(convert_main(sys.argv[1:]))
