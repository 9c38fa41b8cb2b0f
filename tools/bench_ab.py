"""Two variants of one train step, timed side by side in one process: the before/after figure
of a change smaller than the machine's drift between two runs.

Each side is the shared config (`--config` and its `--config.KEY=VALUE` overrides) with its
own overrides (`--a KEY=VALUE`, `--b KEY=VALUE`, each repeatable, keys as after `--config.`)
and, optionally, XLA compiler options of its own (`--a-xla NAME=VALUE`, `--b-xla ...`, the
options XLA_FLAGS sets, added to that side's `backend.xla_options`). Both are built and compiled
once in this process on the same devices with a synthetic batch (as `jaxtrain bench`). Rounds then
alternate between them, each round starting with the side that went second in the last, and
the report gives each side's median step time and tokens/s and the median and range of the
per-round ratio B / A of time per token: both sides run on the same heap, thread pool and
load, so the ratio holds where two separate runs drift apart by more than the change itself
(on a shared 2-core VM, by 10-30% from one minute to the next).

    python tools/bench_ab.py --config configs/bench_tiny_llama.py \\
        --b model.attention_block=128 [--rounds 24] [--steps 3] [--warmup 2]
    python tools/bench_ab.py --config configs/bench_tiny_llama.py --config.model.dtype=bfloat16 \\
        --b-xla xla_cpu_prefer_vector_width=512
    python tools/bench_ab.py --config configs/llama3_8b.py --config.model.num_layers=4 \\
        --b-xla xla_gpu_enable_latency_hiding_scheduler=false
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # runs from a clone without installing

from jaxtrain.commands import bench  # noqa: E402
from jaxtrain.commands.options import at_least, split_overrides, xla_option  # noqa: E402
from jaxtrain.errors import ConfigError  # noqa: E402
from jaxtrain.hardware import xla_options  # noqa: E402


@dataclasses.dataclass
class Side:
    """One variant: its name, what it changes, and its trainer (the compiled step and its own
    train state)."""

    name: str
    overrides: list[str]
    xla: dict[str, Any]
    trainer: Any
    batch: Any
    tokens: int
    seconds: list[float] = dataclasses.field(default_factory=list)

    def run(self, steps: int) -> float:
        """Seconds per step of `steps` steps, none in flight before or after."""
        import jax

        step, state = self.trainer.compiled_step, self.trainer.state
        jax.block_until_ready(state)
        start = time.perf_counter()
        for _ in range(steps):
            state, _ = step(state, self.batch)
        jax.block_until_ready(state)
        self.trainer.state = state
        return (time.perf_counter() - start) / steps

    def describe(self) -> str:
        changes = self.overrides + [
            f"xla {xla_options.text_of({k: v})}" for k, v in self.xla.items()
        ]
        return ", ".join(changes) or "as configured"


def override(text: str) -> str:
    """KEY=VALUE as a config override, `--config.KEY=VALUE`."""
    if "=" not in text or text.startswith("-"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not KEY=VALUE (a config key as after --config., e.g. model.remat=full)"
        )
    return f"--config.{text}"


SIDE_OPTIONS = ("--a", "--b", "--a-xla", "--b-xla")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    # `--b model.remat=full` joined as `--b=model.remat=full` first: split_overrides would take
    # a bare KEY=VALUE for an override of the config's own format.
    joined, i = [], 0
    while i < len(argv):
        if argv[i] in SIDE_OPTIONS and i + 1 < len(argv):
            joined.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            joined.append(argv[i])
            i += 1
    rest, common, _ = split_overrides(joined)
    parser = argparse.ArgumentParser(prog="bench_ab", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="the config both sides start from")
    for side in ("a", "b"):
        parser.add_argument(
            f"--{side}", type=override, action="append", default=[], metavar="KEY=VALUE",
            help=f"a config override of side {side.upper()} only (repeatable)",
        )  # fmt: skip
        parser.add_argument(
            f"--{side}-xla", type=xla_option(f"--{side}-xla"), action="append", default=[],
            metavar="NAME=VALUE",
            help=f"an XLA compiler option of side {side.upper()}'s program only (repeatable)",
        )  # fmt: skip
    parser.add_argument("--rounds", type=at_least(1), default=24, help="turns of each side")
    parser.add_argument("--steps", type=at_least(1), default=3, help="steps per turn")
    parser.add_argument("--warmup", type=at_least(0), default=2, help="untimed steps per side")
    return parser.parse_args(rest), common


def build(stack: contextlib.ExitStack, name: str, args, common, overrides, xla) -> Side:
    """One side's trainer, opened on `stack`, its step compiled once with its XLA options
    (added to the config's `backend.xla_options`)."""
    import jax

    from jaxtrain import compat

    cfg = compat.load_config_file(args.config, [*common, *overrides], allow_unsupported=True)
    if xla:
        options = {**xla_options.parse(cfg.backend.xla_options), **dict(xla)}
        cfg.backend.xla_options = xla_options.text_of(options)
    try:
        trainer = stack.enter_context(bench.synthetic_trainer(cfg, 1, jax.devices()[:1]))
    except ConfigError as error:
        raise ConfigError(f"side {name}: {error}") from error
    batch = bench.device_batch(trainer)
    tokens = trainer.cfg.train.global_batch_size * trainer.cfg.train.seq_len
    return Side(name, [o.removeprefix("--config.") for o in overrides], dict(xla), trainer,
                batch, tokens)  # fmt: skip


def report(a: Side, b: Side) -> str:
    """Each side's median figures and the per-round ratio B / A of time per token."""
    lines = []
    for side in (a, b):
        median = statistics.median(side.seconds)
        lines.append(
            f"{side.name}: {side.describe()}: median {median * 1e3:.1f} ms/step, "
            f"{side.tokens / median:,.0f} tokens/s"
        )
    ratios = sorted(
        (tb / b.tokens) / (ta / a.tokens) for ta, tb in zip(a.seconds, b.seconds, strict=True)
    )
    lines.append(
        f"B / A time per token, per round: median {statistics.median(ratios):.3f} "
        f"({ratios[0]:.3f}-{ratios[-1]:.3f}) over {len(ratios)} rounds"
    )
    return "\n".join(lines)


def _commit() -> str:
    result = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return result.stdout.strip() or "unknown"


def main(argv: list[str]) -> int:
    from jaxtrain.hardware.host_malloc import reexec_with_tuned_malloc

    reexec_with_tuned_malloc()  # the settings `python -m jaxtrain` runs with on CPUs
    args, common = parse(argv)
    import jax

    from jaxtrain.hardware import backend

    try:
        with contextlib.ExitStack() as stack:
            a = build(stack, "A", args, common, args.a, args.a_xla)
            b = build(stack, "B", args, common, args.b, args.b_xla)
            for side in (a, b):
                if args.warmup:
                    side.run(args.warmup)
            for r in range(args.rounds):
                for side in (a, b) if r % 2 == 0 else (b, a):
                    side.seconds.append(side.run(args.steps))
    except ConfigError as error:
        print(f"bench_ab: {error}", file=sys.stderr)
        return 2
    device = jax.devices()[0]
    print(f"commit {_commit()}; {device.device_kind} ({device.platform}); "
          f"{backend.detect().describe()}")  # fmt: skip
    print(f"{args.rounds} rounds of {args.steps} steps per side, {args.warmup} warm-up steps")
    print(report(a, b))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
