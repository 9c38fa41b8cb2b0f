"""Command line: `python -m jaxtrain [train] --config FILE [--config.a.b=value ...]`, plus the
`sample`, `config` and `convert` subcommands. The logic lives in importable modules; this file
only parses arguments and reports errors as one readable line.
"""

from __future__ import annotations

import argparse
import sys

SUBCOMMANDS = ("train", "sample", "config", "convert")


def _split_config_args(argv: list[str]) -> tuple[str, list[str], list[str]]:
    """(config path, `--config.x=y` overrides, remaining args) from an argv list."""
    path, overrides, rest = "", [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--config" and i + 1 < len(argv):
            path, i = argv[i + 1], i + 2
            continue
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        elif arg.startswith("--config."):
            if "=" not in arg and i + 1 < len(argv):
                arg, i = f"{arg}={argv[i + 1]}", i + 1
            overrides.append(arg)
        else:
            rest.append(arg)
        i += 1
    return path, overrides, rest


def _load(argv: list[str]):
    from jaxtrain import config as config_lib
    from jaxtrain.models.spec import ConfigError

    path, overrides, rest = _split_config_args(argv)
    if not path:
        raise ConfigError("no config given: pass --config FILE (e.g. --config configs/demo.py).")
    return config_lib.load_config(path, overrides), rest


def train_main(argv: list[str]) -> int:
    """Trains from a config file, resuming from the run's latest checkpoint if there is one."""
    from absl import flags

    from jaxtrain import distributed

    cfg, rest = _load(argv)
    if rest:
        raise SystemExit(f"unknown arguments: {' '.join(rest)}")
    # grain's multiprocessing prefetch reads absl flags; mark them parsed.
    flags.FLAGS(sys.argv[:1], known_only=True)
    distributed.initialize_from_env()

    from jaxtrain.train.trainer import train

    train(cfg)
    return 0


def config_main(argv: list[str]) -> int:
    """Prints the resolved config (after overrides) and derived figures."""
    import json

    from jaxtrain import config as config_lib

    parser = argparse.ArgumentParser(prog="jaxtrain config")
    parser.add_argument("file")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    path, overrides, rest = _split_config_args(argv)
    args = parser.parse_args(rest + ([path] if path else []))
    cfg = config_lib.load_config(args.file, overrides)
    spec = config_lib.validate(cfg, check_data=False)
    derived = {
        "num_params": spec.num_params(),
        "tokens_per_step": cfg.train.global_batch_size * cfg.train.seq_len,
        "grad_accumulation_steps": cfg.train.global_batch_size
        // config_lib.micro_batch_size(cfg),
        "flops_per_token": spec.flops_per_token(cfg.train.seq_len),
    }
    if args.json:
        print(json.dumps({"config": cfg.to_dict(), "derived": derived}, indent=2, default=str))
    else:
        print(cfg)
        for key, value in derived.items():
            print(f"# {key}: {value:,}" if isinstance(value, int) else f"# {key}: {value:.4g}")
    return 0


def sample_main(argv: list[str]) -> int:
    """Continues a prompt with a trained run's checkpoint."""
    parser = argparse.ArgumentParser(prog="jaxtrain sample")
    parser.add_argument("--run", required=True, help="run directory")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (latest)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default="", help="tokenizer folder (the run's by default)")
    args = parser.parse_args(argv)

    from transformers import AutoTokenizer

    from jaxtrain.runs import load_model
    from jaxtrain.sample import complete

    model, cfg, step = load_model(args.run, args.step)
    tokenizer_dir = args.tokenizer or cfg.data.tokenizer
    if not tokenizer_dir:
        raise SystemExit("the run names no tokenizer (data.tokenizer); pass --tokenizer DIR.")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    text = complete(model, tokenizer, args.prompt, max_new_tokens=args.max_new_tokens,
                    temperature=args.temperature, top_k=args.top_k, seed=args.seed)
    print(f"[step {step}] {args.prompt}{text}")
    return 0


def convert_main(argv: list[str]) -> int:
    """Hugging Face checkpoint conversion (see jaxtrain/interop)."""
    from jaxtrain.interop.convert_cli import convert_main as run_convert

    return run_convert(argv)


def main(argv: list[str] | None = None) -> int:
    """Dispatches to a subcommand; `train` is the default."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "train"
    handlers = {"train": train_main, "sample": sample_main, "config": config_main,
                "convert": convert_main}
    from jaxtrain.checkpoint import CheckpointError
    from jaxtrain.data.errors import DataError
    from jaxtrain.models.spec import ConfigError
    from jaxtrain.sharding import MeshError
    from jaxtrain.train.trainer import TrainingError

    try:
        return handlers[command](argv)
    except (ConfigError, DataError, CheckpointError, MeshError, TrainingError,
            FileNotFoundError) as e:
        print(f"jaxtrain {command}: error: {e}", file=sys.stderr)
        return 2


def run() -> None:
    """Console-script entry point."""
    raise SystemExit(main())


if __name__ == "__main__":
    run()
