"""Command line: `python -m jaxtrain [train] --config FILE [--config.a.b=value ...]`, plus the
`sample`, `config`, `convert`, `export`, `checkpoints`, `plot` and `runs` subcommands. The logic
lives in importable modules; this file only parses arguments and reports errors as one readable
line.
"""

from __future__ import annotations

import argparse
import sys

SUBCOMMANDS = ("train", "sample", "config", "convert", "bench", "export", "checkpoints",
               "plot", "runs")


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


def _foreign_args(rest: list[str]) -> tuple[dict, list[str], list[str]]:
    """Pulls the foreign-config flags (--allow-unsupported, --primus-root DIR, --maxtext-root
    DIR) and bare `key=value` overrides (in the foreign file's own terms) out of `rest`."""
    options = {"allow_unsupported": False, "primus_root": None, "maxtext_root": None}
    native, remaining = [], []
    i = 0
    while i < len(rest):
        arg = rest[i]
        name = arg.split("=", 1)[0]
        if arg == "--allow-unsupported":
            options["allow_unsupported"] = True
        elif name in ("--primus-root", "--maxtext-root"):
            key = name[2:].replace("-", "_")
            if "=" in arg:
                options[key] = arg.split("=", 1)[1]
            elif i + 1 < len(rest):
                options[key], i = rest[i + 1], i + 1
        elif "=" in arg and not arg.startswith("-"):
            native.append(arg)
        else:
            remaining.append(arg)
        i += 1
    return options, native, remaining


def _load(argv: list[str]):
    from jaxtrain import compat
    from jaxtrain import config as config_lib
    from jaxtrain.models.spec import ConfigError

    path, overrides, rest = _split_config_args(argv)
    if not path:
        raise ConfigError("no config given: pass --config FILE (e.g. --config configs/demo.py).")
    options, native, rest = _foreign_args(rest)
    if not compat.is_foreign(path):
        return config_lib.load_config(path, overrides, native_overrides=native), rest
    cfg, report = compat.load_foreign(path, overrides, native_overrides=native, **options)
    print(report.summary(), flush=True)
    for line in report.notes + [f"unsupported (allowed): {e.key}={e.value!r}: {e.reason}"
                                for e in report.by_status("unsupported")]:
        print(f"  {line}", flush=True)
    return cfg, rest


def _distributed_flags() -> argparse.ArgumentParser:
    """Multi-process flags of `train`; without them the launcher's environment is read."""
    parser = argparse.ArgumentParser(prog="jaxtrain train", add_help=False)
    parser.add_argument("--coordinator", default=None,
                        help="HOST:PORT of process 0 (env JAXTRAIN_COORDINATOR)")
    parser.add_argument("--num-processes", type=int, default=None,
                        help="processes in the job (env JAXTRAIN_NUM_PROCESSES)")
    parser.add_argument("--process-id", type=int, default=None,
                        help="this process, 0..N-1 (env JAXTRAIN_PROCESS_ID)")
    parser.add_argument("--init-timeout", type=int, default=None,
                        help="seconds to wait for every process (env JAXTRAIN_INIT_TIMEOUT)")
    return parser


def train_main(argv: list[str]) -> int:
    """Trains from a config file, resuming from the run's latest checkpoint if there is one."""
    from absl import flags

    from jaxtrain import distributed

    cfg, rest = _load(argv)
    launch = _distributed_flags().parse_args(rest)
    # grain's multiprocessing prefetch reads absl flags; mark them parsed.
    flags.FLAGS(sys.argv[:1], known_only=True)
    distributed.initialize_from_env(
        launch.init_timeout, coordinator=launch.coordinator,
        num_processes=launch.num_processes, process_id=launch.process_id)

    from jaxtrain.train.trainer import train

    train(cfg)
    distributed.stop_watching()  # the work is done: the peers may see this process leave
    return 0


def config_main(argv: list[str]) -> int:
    """Prints the resolved config (after overrides), derived figures and, for a foreign file,
    the report of what became of every source key. Unsupported keys are part of the report, not
    an error: the command exits 0 whenever it printed one (training refuses them)."""
    import json

    from jaxtrain import compat
    from jaxtrain import config as config_lib

    parser = argparse.ArgumentParser(
        prog="jaxtrain config",
        description="Prints a config as it resolves, its derived figures and, for a foreign "
                    "file, what became of every key. Exits 0 when the report is printed, "
                    "unsupported keys included (training refuses those unless "
                    "--allow-unsupported); 2 when the file cannot be read as a config.")
    parser.add_argument("file")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object: config, derived, unsupported (a list of "
                             "{key, value, reason, ...}) and, for a foreign file, report")
    parser.add_argument("--devices", type=int, default=None,
                        help="plan for this many devices in all (default: this host's, or "
                             "those a foreign file's launcher settings name)")
    parser.add_argument("--hosts", type=int, default=None,
                        help="hosts (processes) the devices are spread over (dcn_* axes)")
    path, overrides, rest = _split_config_args(argv)
    options, native, rest = _foreign_args(rest)
    args = parser.parse_args(rest + ([path] if path else []))
    report = None
    if compat.is_foreign(args.file):
        cfg, report = compat.load_foreign(args.file, overrides, native_overrides=native,
                                          **{**options, "allow_unsupported": True})
    else:
        cfg = config_lib.load_config(args.file, overrides, native_overrides=native)
    from jaxtrain.device_plan import plan_devices

    # This host's devices, unless --devices/--hosts or the file's launch name others.
    plan = plan_devices(args.devices, args.hosts, report)
    devices, hosts = plan.devices, plan.hosts
    derived = {**compat.derived(cfg, devices, hosts), **plan.figures(cfg)}
    if isinstance(derived["mesh"], dict):  # a mesh that fits: size its state per device
        from jaxtrain import memory_plan

        plan, axis_sizes = memory_plan.plan_for_mesh(
            cfg, config_lib.validate(cfg, check_data=False), devices, hosts)
        derived["memory_per_device"] = memory_plan.describe_state(plan, axis_sizes)
        derived["state_bytes_per_device"] = {
            "parameters": plan.params, "optimizer_state": plan.optimizer,
            "gradients": plan.params, "batch": plan.batch}
    unsupported = report.by_status("unsupported") if report is not None else []
    if args.json:
        payload = {"config": cfg.to_dict(), "derived": derived,
                   "unsupported": [e.to_json() for e in unsupported]}
        if report is not None:
            payload["report"] = report.to_json()
        print(json.dumps(payload, indent=2, default=str))
    else:
        print(cfg)
        for key, value in derived.items():
            text = f"{value:,}" if isinstance(value, int) else (
                f"{value:.4g}" if isinstance(value, float) else value)
            print(f"# {key}: {text}")
        if report is not None:
            print(report.table())
        if unsupported:
            print(f"# {len(unsupported)} unsupported key(s) (listed first above): training "
                  "refuses this config unless --allow-unsupported.")
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


def bench_main(argv: list[str]) -> int:
    """Times the train step of a config (see jaxtrain/bench.py)."""
    from jaxtrain.bench import bench_main as run_bench

    return run_bench(argv)


def export_main(argv: list[str]) -> int:
    """Writes a run's checkpoint as a Hugging Face folder (see jaxtrain/export.py)."""
    from jaxtrain.interop.convert_cli import parse_size

    parser = argparse.ArgumentParser(prog="jaxtrain export")
    parser.add_argument("--run", required=True, help="run directory")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (latest)")
    parser.add_argument("--to", nargs=2, required=True, metavar=("FORMAT", "OUT"),
                        help="format (hf) and output folder")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                        help="stored weight dtype (default: the run's model.param_dtype)")
    parser.add_argument("--max-shard-size", type=parse_size, default=5 * 10**9, metavar="SIZE",
                        help="largest safetensors file, e.g. 5GB (default) or 500MB")
    args = parser.parse_args(argv)

    from jaxtrain.export import FORMATS, export_hf

    fmt, out = args.to
    if fmt not in FORMATS:
        parser.error(f"--to {fmt}: unknown format; known: {', '.join(FORMATS)}")
    export_hf(args.run, out, args.step, dtype=args.dtype, max_shard_bytes=args.max_shard_size)
    return 0


def checkpoints_main(argv: list[str]) -> int:
    """Lists a run's checkpoints, or verifies one (see jaxtrain/inspect_run.py)."""
    parser = argparse.ArgumentParser(prog="jaxtrain checkpoints")
    parser.add_argument("run", help="run directory or checkpoint folder")
    parser.add_argument("--verify", action="store_true",
                        help="read every array of every step (newest first) and check it; "
                             "exit status 1 when any step is damaged")
    parser.add_argument("--step", type=int, default=None,
                        help="verify only this step (default: every step)")
    args = parser.parse_args(argv)

    from jaxtrain import inspect_run

    print(inspect_run.format_listing(*inspect_run.list_checkpoints(args.run)), flush=True)
    if not args.verify:
        return 0
    damaged = 0
    for result in inspect_run.verify_steps(args.run, args.step):
        print(result, flush=True)
        damaged += not result.ok
    if damaged:
        print(f"{damaged} damaged step(s)", flush=True)
    return 1 if damaged else 0


def plot_main(argv: list[str]) -> int:
    """Writes PNG figures comparing runs' metrics (see jaxtrain/plot.py)."""
    from jaxtrain.plot import plot_main as run_plot

    return run_plot(argv)


def runs_main(argv: list[str]) -> int:
    """Summarises run directories: config, progress, metrics, checkpoints, ETA."""
    from jaxtrain.run_report import runs_main as run_runs

    return run_runs(argv)


def main(argv: list[str] | None = None) -> int:
    """Dispatches to a subcommand; `train` is the default."""
    if argv is None:  # a real command line, which may restart with CPU malloc settings
        from jaxtrain.host_malloc import reexec_with_tuned_malloc

        reexec_with_tuned_malloc()
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else "train"
    handlers = {"train": train_main, "sample": sample_main, "config": config_main,
                "convert": convert_main, "bench": bench_main, "export": export_main,
                "checkpoints": checkpoints_main, "plot": plot_main, "runs": runs_main}
    from jaxtrain import distributed
    from jaxtrain.checkpoint import CheckpointError
    from jaxtrain.data.errors import DataError
    from jaxtrain.disk_full import DiskFullError
    from jaxtrain.distributed import DistributedError
    from jaxtrain.models.spec import ConfigError
    from jaxtrain.run_lock import RunLockError
    from jaxtrain.sharding import MeshError
    from jaxtrain.train.trainer import TrainingError

    # In a multi-process run every failure also tells the other processes, which would otherwise
    # wait for this one in a collective (`abandon` exits; it returns in a one-process run).
    try:
        return handlers[command](argv)
    except (ConfigError, DataError, CheckpointError, MeshError, TrainingError,
            DistributedError, RunLockError, DiskFullError, FileNotFoundError) as e:
        print(f"jaxtrain {command}: error: {e}", file=sys.stderr)
        distributed.abandon(2)
        return 2
    except KeyboardInterrupt as e:  # a second SIGINT/SIGTERM: stop now, without a checkpoint
        print(f"jaxtrain {command}: aborted ({e or 'interrupted'}); the last complete "
              "checkpoint is intact.", file=sys.stderr)
        distributed.abandon(130)
        return 130
    except Exception as e:
        import traceback

        distributed.explain_runtime_error(e)  # exits naming a lost peer, if one was lost
        traceback.print_exc()
        distributed.abandon(1)
        raise


def run() -> None:
    """Console-script entry point."""
    raise SystemExit(main())


if __name__ == "__main__":
    run()
