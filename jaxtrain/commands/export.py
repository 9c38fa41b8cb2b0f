"""Exporting a trained run: `python -m jaxtrain export --run DIR [--step N] --to hf OUT`.

Only the parameters of the checkpoint are read (a partial Orbax restore onto the devices here,
whatever mesh the run trained on), then written tensor by tensor as a Hugging Face folder that
`transformers.AutoModelForCausalLM.from_pretrained(OUT)` loads, with the run's tokenizer files
(`data.tokenizer`) beside them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jaxtrain.checkpoint.saved_run import restore_params
from jaxtrain.commands.options import WEIGHT_DTYPES, check_output_folder, parse_size
from jaxtrain.data.text_inputs import eos_id_from_tokenizer
from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf import save_hf_checkpoint
from jaxtrain.train import buffers
from jaxtrain.train.state import count_params

FORMATS = ("hf",)


def export_hf(
    run_dir: str | Path,
    out: str | Path,
    step: int | None = None,
    *,
    dtype: str | None = None,
    max_shard_bytes: int = 5 * 10**9,
) -> Path:
    """Writes checkpoint `step` (latest by default) of a run as a Hugging Face folder.

    `dtype` is the stored weight dtype (default: the run's `model.param_dtype`). Prints one
    line saying what was written. Peak host memory is one stacked parameter plus one
    safetensors shard (`max_shard_bytes`).
    """
    restored = restore_params(run_dir, step)
    weights = buffers.weights(restored.layout.graphdef, restored.params)  # no fp8 amax history
    tokenizer = restored.cfg.data.get("tokenizer", "") or None
    extra = {}
    if tokenizer and not Path(tokenizer).is_dir():
        print(
            f"export: warning: the run's tokenizer {tokenizer} is not here; exporting "
            "weights and config only",
            file=sys.stderr,
        )
        tokenizer = None
    if tokenizer and (eos := eos_id_from_tokenizer(tokenizer)) is not None:
        extra["eos_token_id"] = eos
    out = save_hf_checkpoint(
        restored.spec,
        weights,
        out,
        tokenizer_dir=tokenizer,
        max_shard_bytes=max_shard_bytes,
        dtype=dtype,
        config_extra=extra,
    )
    print(
        f"exported step {restored.step} of {run_dir} ({restored.spec.family}, "
        f"{count_params(weights):,} params) to {out}"
        f"{' with the tokenizer of ' + tokenizer if tokenizer else ''}"
    )
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `export`: the run, its step, the format and folder, and how to write."""
    parser.add_argument("--run", required=True, help="run directory")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (latest)")
    parser.add_argument(
        "--to",
        nargs=2,
        required=True,
        metavar=("FORMAT", "OUT"),
        help="format (hf) and output folder",
    )
    parser.add_argument(
        "--dtype",
        choices=WEIGHT_DTYPES,
        default=None,
        help="stored weight dtype (default: the run's model.param_dtype)",
    )
    parser.add_argument(
        "--max-shard-size",
        type=parse_size,
        default=5 * 10**9,
        metavar="SIZE",
        help="largest safetensors file, e.g. 5GB (default) or 500MB",
    )


def handle(args: argparse.Namespace) -> int:
    """Exports the run's checkpoint in the named format; returns the exit status."""
    fmt, out = args.to
    if fmt not in FORMATS:
        raise ConfigError(f"--to {fmt}: unknown format; known: {', '.join(FORMATS)}.")
    check_output_folder(out, f"--to {fmt}")  # before the checkpoint is read
    export_hf(args.run, out, args.step, dtype=args.dtype, max_shard_bytes=args.max_shard_size)
    return 0
