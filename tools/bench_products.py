"""Each matrix product of the bench step, alone: XLA (as jaxtrain's step runs it on this CPU)
against torch (the MKL / oneDNN kernels transformers' step runs), interleaved.

`tools/bench_vs_torch.py` says how far apart the two train steps are; this says how much of
that the products explain. The step's products are its projections (attention's q, k, v and
output, the MLP's gate, up and down, the output layer), each three times: forward
`[tokens, in] x [in, out]`, input gradient `[tokens, out] x [out, in]` and kernel gradient
`[in, tokens] x [tokens, out]`. Products of one shape are timed once and counted as often as
the step runs them, so the last line adds up what one step spends in products with each
library's kernels. Attention's own batched products (scores and their gradients, per block)
are left out: their shapes depend on each side's attention kernel.

Each library runs in a process of its own with the malloc settings of `python -m jaxtrain`
(as in bench_vs_torch.py), on all the cores it finds; each round times every shape in one
process, then in the other, the first one alternating, and a shape's figure is its best run
over all rounds. XLA's float32 products are `lax.dot` on float32 arrays. With `--bf16`, XLA's
take bfloat16 operands and a float32 result, as the step's products do where the CPU has
bfloat16 dot instructions (elsewhere the operands are widened first: the backend's choice,
`jaxtrain.models.layers.products`), and torch's are `torch.mm` on bfloat16 tensors, what
`torch.autocast` hands it. In the step, XLA runs a backward pass's independent products side by
side, one core each; here each has every core to itself.

    python tools/bench_products.py [--rounds 3] [--repeats 5] [--bf16]
      [--config.model.hidden_size=512 ...]
  Config overrides set the shapes (configs/bench_tiny_llama.py by default). The report names the
  CPU (model and instruction sets) it was measured on.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # runs from a clone without installing

from jaxtrain.config import loader as config_lib  # noqa: E402
from jaxtrain.hardware import backend  # noqa: E402

LIBRARIES = ("XLA", "torch")
# Instruction sets that decide a CPU's matmul speed, shown with every figure.
ISA = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})


@dataclasses.dataclass(frozen=True)
class Product:
    """One product shape of the step, [m, k] x [k, n], and how often a step runs it."""

    names: tuple[str, ...]  # the projections and passes that have this shape
    m: int
    k: int
    n: int
    per_step: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n


def step_products(spec, tokens: int) -> list[Product]:
    """The projections' products of one train step of a dense decoder (`ModelSpec`), one entry
    per shape, in the order the forward pass first meets them."""
    q = spec.num_heads * spec.head_dim
    kv = spec.num_kv_heads * spec.head_dim
    d, f = spec.hidden_size, spec.intermediate_size
    projections = [
        ("q", d, q, spec.num_layers),
        ("k", d, kv, spec.num_layers),
        ("v", d, kv, spec.num_layers),
        ("o", q, d, spec.num_layers),
        ("gate", d, f, spec.num_layers),
        ("up", d, f, spec.num_layers),
        ("down", f, d, spec.num_layers),
        ("output", d, spec.vocab_size, 1),
    ]
    shapes: dict[tuple[int, int, int], tuple[list[str], int]] = {}
    for name, fan_in, fan_out, count in projections:
        for label, shape in (
            (name, (tokens, fan_in, fan_out)),
            (f"{name} input grad", (tokens, fan_out, fan_in)),
            (f"{name} kernel grad", (fan_in, tokens, fan_out)),
        ):
            names, seen = shapes.get(shape, ([], 0))
            shapes[shape] = ([*names, label], seen + count)
    return [Product(tuple(names), *shape, count) for shape, (names, count) in shapes.items()]


class XlaProducts:
    """XLA's compiled products, float32 and, where asked, bfloat16 with a float32 result."""

    def __init__(self, products: list[Product], dtypes: list[str]):
        import jax
        import jax.numpy as jnp
        import numpy as np

        from jaxtrain.models.layers.products import float32_operands

        def product(a, b):
            return jax.lax.dot(*float32_operands(a, b), preferred_element_type=jnp.float32)

        rng = np.random.default_rng(0)
        self._jax = jax
        self._matmul = jax.jit(product)
        self._operands = {
            (dtype, p): tuple(
                jnp.asarray(rng.standard_normal(shape, np.float32), jnp.dtype(dtype))
                for shape in ((p.m, p.k), (p.k, p.n))
            )
            for dtype in dtypes
            for p in products
        }
        for a, b in self._operands.values():
            self._matmul(a, b).block_until_ready()  # compiles each shape before any timing

    def time(self, dtype: str, product: Product) -> float:
        a, b = self._operands[(dtype, product)]
        start = time.perf_counter()
        self._matmul(a, b).block_until_ready()
        return time.perf_counter() - start


class TorchProducts:
    """torch.mm on float32 tensors and, where asked, on bfloat16 ones (as under autocast)."""

    def __init__(self, products: list[Product], dtypes: list[str]):
        import torch

        torch.set_num_threads(max(1, torch.get_num_threads()))
        generator = torch.Generator().manual_seed(0)
        self._torch = torch
        self._operands = {
            (dtype, p): tuple(
                torch.randn(shape, generator=generator).to(getattr(torch, dtype))
                for shape in ((p.m, p.k), (p.k, p.n))
            )
            for dtype in dtypes
            for p in products
        }
        for a, b in self._operands.values():
            torch.mm(a, b)

    def time(self, dtype: str, product: Product) -> float:
        a, b = self._operands[(dtype, product)]
        start = time.perf_counter()
        self._torch.mm(a, b)
        return time.perf_counter() - start


def _library_process(library: str, products: list[Product], dtypes: list[str], connection):
    """Builds one library's operands, then answers each number of repeats it receives with
    {(dtype, shape index): best seconds of that many runs}, until it receives None."""
    runner = (XlaProducts if library == "XLA" else TorchProducts)(products, dtypes)
    connection.send("ready")
    while (repeats := connection.recv()) is not None:
        connection.send(
            {
                (dtype, i): min(runner.time(dtype, p) for _ in range(repeats))
                for dtype in dtypes
                for i, p in enumerate(products)
            }
        )


def measure(
    products: list[Product], dtypes: list[str], rounds: int, repeats: int
) -> dict[str, dict[tuple[str, int], float]]:
    """{library: {(dtype, shape index): best seconds over all rounds}}, the libraries in
    processes of their own, taking turns."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    connections, processes = {}, []
    try:
        for library in LIBRARIES:
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_library_process, daemon=True, args=(library, products, dtypes, theirs)
            )
            process.start()
            processes.append(process)
            connections[library] = ours
            ours.recv()
        best: dict[str, dict[tuple[str, int], float]] = {lib: {} for lib in LIBRARIES}
        for r in range(rounds):
            for library in LIBRARIES[r % 2 :] + LIBRARIES[: r % 2]:
                connections[library].send(repeats)
                for key, seconds in connections[library].recv().items():
                    best[library][key] = min(seconds, best[library].get(key, float("inf")))
        return best
    finally:
        for connection, process in zip(connections.values(), processes):
            if process.is_alive():
                connection.send(None)
            process.join(timeout=60)


def report(products: list[Product], dtypes: list[str], best) -> str:
    """One table per dtype, and what one step spends in products with each library's kernels."""
    lines = []
    for dtype in dtypes:
        lines += [
            "",
            f"{dtype}: GFLOP/s of each product alone (best run)",
            "| [M, K] x [K, N] | per step | XLA | torch | XLA / torch time | products |",
            "|---|---|---|---|---|---|",
        ]
        step = dict.fromkeys(LIBRARIES, 0.0)
        for i, p in enumerate(products):
            seconds = {lib: best[lib][(dtype, i)] for lib in LIBRARIES}
            for lib in LIBRARIES:
                step[lib] += p.per_step * seconds[lib]
            lines.append(
                f"| [{p.m}, {p.k}] x [{p.k}, {p.n}] | {p.per_step} | "
                + " | ".join(f"{p.flops / seconds[lib] / 1e9:.1f}" for lib in LIBRARIES)
                + f" | {seconds['XLA'] / seconds['torch']:.2f} | {', '.join(p.names)} |"
            )
        lines.append(
            f"products of one step, {dtype}: XLA {step['XLA'] * 1e3:.1f} ms, "
            f"torch {step['torch'] * 1e3:.1f} ms (XLA / torch {step['XLA'] / step['torch']:.2f})"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import importlib.util

    from jaxtrain.commands.options import split_overrides
    from jaxtrain.hardware.host_malloc import reexec_with_tuned_malloc

    reexec_with_tuned_malloc()  # the settings `python -m jaxtrain` runs with; both inherit them
    rest, overrides, _ = split_overrides(argv)
    parser = argparse.ArgumentParser(prog="bench_products")
    parser.add_argument("--rounds", type=int, default=3, help="turns of each library")
    parser.add_argument("--repeats", type=int, default=5, help="runs of a shape per turn")
    parser.add_argument("--bf16", action="store_true", help="also bfloat16 products")
    args = parser.parse_args(rest)
    if importlib.util.find_spec("torch") is None:
        print("torch is not installed: pip install -e '.[test]' (torch 2.13.0 CPU)")
        return 1
    cfg = config_lib.load_config(str(REPO / "configs" / "bench_tiny_llama.py"), overrides)
    spec = config_lib.validate(cfg)
    tokens = cfg.train.global_batch_size * cfg.train.seq_len
    products = step_products(spec, tokens)
    dtypes = ["float32"] + (["bfloat16"] if args.bf16 else [])
    best = measure(products, dtypes, args.rounds, args.repeats)

    isa = ", ".join(sorted(backend.cpu_flags() & ISA)) or "no AVX2"
    print(
        f"CPU: {backend.cpu_model()} ({isa}), {os.cpu_count()} cores; {backend.detect().describe()}"
    )
    print(
        f"shape: {spec.num_layers} layers, d={spec.hidden_size}, "
        f"{spec.num_heads}/{spec.num_kv_heads} heads of {spec.head_dim}, "
        f"MLP {spec.intermediate_size}, vocab {spec.vocab_size}, {tokens} tokens a step; "
        f"{args.rounds} rounds of {args.repeats} runs"
    )
    print(report(products, dtypes, best))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
