"""`python -m jaxtrain sample --run DIR --prompt TEXT`: continue a prompt with a run's checkpoint.

The sampler itself is `jaxtrain.models.generation`; this command reads the run's model and
tokenizer and prints the prompt with its continuation, prefixed by the checkpoint's step.
"""

from __future__ import annotations

import argparse

from jaxtrain.checkpoint.saved_run import load_model
from jaxtrain.data.tokenizer_check import check_tokenizer_folder
from jaxtrain.errors import ConfigError
from jaxtrain.hardware import compile_cache
from jaxtrain.models.generation import complete, load_tokenizer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `sample`: the run, its step, the prompt and how to draw tokens."""
    parser.add_argument("--run", required=True, help="run directory")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (latest)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument("--top-k", type=int, default=0, help="0: all tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default="", help="tokenizer folder (the run's by default)")


def handle(args: argparse.Namespace) -> int:
    """Prints `[step N] PROMPT+CONTINUATION`; returns the exit status."""
    fix = (
        "Pass --tokenizer DIR: the folder of the tokenizer the run was trained with (one "
        "holding tokenizer.json)."
    )
    check_tokenizer_folder(args.tokenizer, "--tokenizer", fix)  # before the checkpoint is read
    model, cfg, step = load_model(args.run, args.step)
    compile_cache.install_for_reading(cfg.backend.get("compile_cache", ""))
    if not args.tokenizer:
        if not cfg.data.tokenizer:
            raise ConfigError(
                f"the run {args.run} names no tokenizer (data.tokenizer); pass --tokenizer DIR."
            )
        check_tokenizer_folder(cfg.data.tokenizer, "data.tokenizer", fix)
    tokenizer_dir = args.tokenizer or cfg.data.tokenizer
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
