"""jaxtrain against transformers + torch (eager and torch.compile) on one CPU, interleaved.

The same Llama shape (configs/bench_tiny_llama.py: 4 layers, d=256, GQA 8/4 heads, SwiGLU 688,
vocab 8192), the same batch (8 x 256 tokens), the same optimizer (AdamW, betas 0.9/0.95,
weight decay 0.1, gradient clipping at 1.0), float32; with `--bf16` also jaxtrain with
bfloat16 compute against torch eager under `torch.autocast(dtype=bfloat16)` (float32 master
weights on both sides: the fair bfloat16 comparison). Each round times a few steps of every
contender in turn, starting with a different one each round, so a machine that gets busier or
quieter affects all of them alike; the report gives the median tokens/s of the rounds, the
ratio of the medians, and the median and range of the per-round ratios.

Each contender lives in a process of its own, started with the same malloc settings: in one
shared process, torch's and XLA's allocations interleave in one heap and their thread pools
overlap, which cost both of them 5-8% per step. Between turns the tool pauses briefly
(`--settle`), so that a thread pool still spin-waiting after its turn does not run into the
next contender's timing. Once all are built, every contender runs `--warmup` untimed steps: the
first steps after compiling still grow the heap and fault its pages in.

    python tools/bench_vs_torch.py [--rounds 7] [--steps 3] [--warmup 6] [--settle 0.3]
      [--no-compile] [--bf16] [--config.train.global_batch_size=16 ...]
  Config overrides set the shape, batch and optimizer of every contender. Every report line
  names the CPU (model and instruction sets) it was measured on.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # runs from a clone without installing

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxtrain.commands.bench import synthetic_batch  # noqa: E402
from jaxtrain.config import loader as config_lib  # noqa: E402
from jaxtrain.hardware import backend  # noqa: E402
from jaxtrain.hardware import peaks as perf  # noqa: E402

JAX_BF16, TORCH_BF16 = "jaxtrain bf16", "torch autocast bf16"
# Instruction sets that decide a CPU's matmul speed, shown with every figure.
ISA = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})


class JaxContender:
    """jaxtrain's compiled train step on a fixed device-resident batch."""

    def __init__(self, cfg):
        import tempfile

        from jaxtrain.trainer import Trainer

        self._tmp = tempfile.TemporaryDirectory()
        cfg.run.dir = self._tmp.name
        cfg.checkpoint.resume = False
        self.trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
        self.batch = self.trainer.setup.global_batch(
            synthetic_batch(cfg, self.trainer.spec.vocab_size)
        )
        self.step_fn, self.compile_s = self.trainer.compiled_step, self.trainer.compile_s
        self.state = self.trainer.state

    def run(self, steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            self.state, metrics = self.step_fn(self.state, self.batch)
        jax.block_until_ready(metrics)
        return time.perf_counter() - start


class TorchContender:
    """transformers' LlamaForCausalLM with torch.optim.AdamW, eager or torch.compile'd."""

    def __init__(self, cfg, compiled: bool, autocast: bool = False):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        m = cfg.model
        torch.manual_seed(0)
        model = LlamaForCausalLM(
            LlamaConfig(
                vocab_size=m.vocab_size,
                hidden_size=m.hidden_size,
                num_hidden_layers=m.num_layers,
                num_attention_heads=m.num_heads,
                num_key_value_heads=m.num_kv_heads,
                head_dim=m.head_dim,
                intermediate_size=m.intermediate_size,
                max_position_embeddings=m.max_seq_len,
                rms_norm_eps=m.norm_eps,
                tie_word_embeddings=False,
                attn_implementation="sdpa",
            )
        )
        self.torch = torch
        self.model = model.train()
        self.optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=cfg.optim.lr,
            betas=(cfg.optim.b1, cfg.optim.b2),
            eps=cfg.optim.eps,
            weight_decay=cfg.optim.weight_decay,
        )
        batch = synthetic_batch(cfg, m.vocab_size)
        self.inputs = torch.from_numpy(batch["inputs"].astype(np.int64))
        self.targets = torch.from_numpy(batch["targets"].astype(np.int64))
        self.vocab = m.vocab_size
        self.autocast = autocast
        self.forward = torch.compile(self._loss) if compiled else self._loss
        start = time.perf_counter()
        self._step()  # the first call compiles under torch.compile
        self.compile_s = time.perf_counter() - start

    def _loss(self, inputs, targets):
        logits = self.model(input_ids=inputs).logits
        return self.torch.nn.functional.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))

    def _step(self):
        if self.autocast:  # bfloat16 compute, float32 weights and optimizer
            with self.torch.autocast(device_type="cpu", dtype=self.torch.bfloat16):
                loss = self.forward(self.inputs, self.targets)
        else:
            loss = self.forward(self.inputs, self.targets)
        loss.backward()
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def run(self, steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            loss = self._step()
        float(loss.detach())
        return time.perf_counter() - start


def _contender_process(kind: str, overrides: list[str], connection) -> None:
    """Builds one contender, reports its compile time, then answers each number of steps it
    receives with the seconds they took (wall clock, and CPU time of all the process's
    threads), until it receives None."""
    cfg = config_lib.load_config(str(REPO / "configs" / "bench_tiny_llama.py"), overrides)
    if kind.startswith("jaxtrain"):
        if kind == JAX_BF16:
            cfg.model.dtype = "bfloat16"
        contender = JaxContender(cfg)
    else:
        import torch

        torch.set_num_threads(max(1, torch.get_num_threads()))
        contender = TorchContender(
            cfg, compiled=kind == "torch.compile", autocast=kind == TORCH_BF16
        )
    connection.send(contender.compile_s)
    while (steps := connection.recv()) is not None:
        cpu_start = time.process_time()
        wall = contender.run(steps)
        connection.send((wall, time.process_time() - cpu_start))


def main(argv: list[str]) -> int:
    import multiprocessing

    from jaxtrain.commands.options import split_overrides
    from jaxtrain.hardware.host_malloc import reexec_with_tuned_malloc

    # The malloc settings `python -m jaxtrain` runs with on CPUs; the contenders' processes
    # inherit them, so torch gets them as well.
    reexec_with_tuned_malloc()

    rest, overrides, _ = split_overrides(argv)
    parser = argparse.ArgumentParser(prog="bench_vs_torch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps per contender per round")
    parser.add_argument("--warmup", type=int, default=6, help="untimed steps per contender")
    parser.add_argument(
        "--settle", type=float, default=0.3, help="seconds of pause between two contenders' turns"
    )
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="also jaxtrain bfloat16 compute against torch.autocast bfloat16",
    )
    args = parser.parse_args(rest)
    cfg = config_lib.load_config(str(REPO / "configs" / "bench_tiny_llama.py"), overrides)
    if importlib.util.find_spec("torch") is None:
        print("torch is not installed: pip install -e '.[test]' (torch 2.13.0 CPU)")
        return 1

    kinds = ["jaxtrain", "torch eager"] + ([] if args.no_compile else ["torch.compile"])
    kinds += [JAX_BF16, TORCH_BF16] if args.bf16 else []
    context = multiprocessing.get_context("spawn")
    connections, processes = {}, []
    try:
        for kind in kinds:  # one at a time, so that no compile overlaps another
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_contender_process, daemon=True, args=(kind, overrides, theirs)
            )
            process.start()
            processes.append(process)
            connections[kind] = ours
            print(f"{kind}: first step / compile {ours.recv():.1f} s", flush=True)

        # Warm-up once every contender is built: building the later ones (torch.compile above
        # all) moves memory around under the earlier ones.
        for connection in connections.values():
            connection.send(args.warmup)
            connection.recv()
        tokens = cfg.train.global_batch_size * cfg.train.seq_len * args.steps
        rates: dict[str, list[float]] = {kind: [] for kind in kinds}
        cpu_rates: dict[str, list[float]] = {kind: [] for kind in kinds}
        for r in range(args.rounds):
            # Each round starts with the next contender, so that none always runs first after
            # the previous round or right after the same neighbour.
            order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
            for kind in order:
                time.sleep(args.settle)
                connections[kind].send(args.steps)
                wall, cpu = connections[kind].recv()
                rates[kind].append(tokens / wall)
                cpu_rates[kind].append(tokens / cpu)
            print(
                f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:,.0f}" for n, v in rates.items()),
                flush=True,
            )
    finally:
        for connection, process in zip(connections.values(), processes):
            if process.is_alive():  # a contender that died has already said why
                connection.send(None)
            process.join(timeout=60)

    spec = config_lib.validate(cfg)
    flops = spec.flops_per_token(cfg.train.seq_len)
    peak = perf.measured_matmul_flops()
    # bfloat16 contenders' MFU against the bfloat16 peak (AMX or AVX512-BF16 kernels, where
    # the CPU has them: several times the float32 one).
    peak_bf16 = perf.measured_matmul_flops(dtype="bfloat16") if args.bf16 else peak
    isa = ", ".join(sorted(backend.cpu_flags() & ISA)) or "no AVX2"
    print(
        f"\nCPU: {backend.cpu_model()} ({isa}), {os.cpu_count()} cores; "
        f"{backend.detect().describe()}"
    )
    print(
        f"shape: {cfg.model.num_layers} layers, d={cfg.model.hidden_size}, "
        f"{cfg.model.num_heads}/{cfg.model.num_kv_heads} heads, vocab {cfg.model.vocab_size}, "
        f"batch {cfg.train.global_batch_size} x {cfg.train.seq_len}; "
        f"{flops / 1e6:.1f} MFLOP/token; measured matmul peak {peak / 1e9:.1f} GFLOP/s float32"
        + (f", {peak_bf16 / 1e9:.1f} bfloat16" if args.bf16 else "")
    )
    for name, values in rates.items():
        ours = _same_precision_jaxtrain(name)
        median, base = statistics.median(values), statistics.median(rates[ours])
        mfu = perf.mfu(
            flops, median, configured_peak=peak_bf16 if ours == JAX_BF16 else peak, num_devices=1
        )
        # The ratio within each round, where the contenders ran seconds apart, is steadier
        # than the ratio of medians when the machine's load drifts during the run.
        per_round = sorted(a / b for a, b in zip(rates[ours], values))
        # The spread says how far one run's figure can be trusted on a machine shared with
        # others: a target inside it is met by some runs and missed by others.
        print(
            f"{name:>20}: {median:8,.0f} tokens/s  MFU {mfu:6.1%}  "
            f"{ours}/{name} = {base / median:.2f}x (per round: median "
            f"{statistics.median(per_round):.2f}x, {per_round[0]:.2f}-{per_round[-1]:.2f}x)"
        )
    # Tokens per CPU-second of all a contender's threads: time the machine takes a core away
    # lengthens the wall clock but not this, so it shows how much of a run's spread was the
    # machine. Threads spin-waiting for work count too, so it is no substitute for tokens/s.
    cpu_medians = {name: statistics.median(values) for name, values in cpu_rates.items()}
    print(
        "per CPU-second: "
        + ", ".join(
            f"{name} {median:,.0f} ({cpu_medians[_same_precision_jaxtrain(name)] / median:.2f}x)"
            for name, median in cpu_medians.items()
        )
    )
    return 0


def _same_precision_jaxtrain(name: str) -> str:
    """The jaxtrain contender a contender is compared with: the one at its precision."""
    return JAX_BF16 if name in (JAX_BF16, TORCH_BF16) else "jaxtrain"


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
