"""Whether the GPU's kernels compute what the portable ones do: attention and whole train steps.

`tools/bench_gpu.py` times the kernels a GPU picks (cuDNN's fused attention on NVIDIA, fp8
matmuls with `model.quantization=fp8`); this checks their results before those figures count.

1. Attention alone: causal grouped-query attention on random bfloat16 inputs, the output and
   the gradients of q, k and v (through a random cotangent), by each implementation against
   `dot` on float32 copies of the same inputs, as ||x - ref|| / ||ref||. Full causal and a
   sliding window.
2. The experts' grouped matmul the backend picks (`jax.lax.ragged_dot` on GPUs): output, row
   and weight gradients on random bfloat16 inputs in uneven groups, one of them empty, against
   the portable row tiles on float32 copies.
3. Train steps: a small Llama trained a few steps on one random batch with `cudnn`, `blockwise`
   and fp8 matmuls, and a small Mixtral-shaped model with the backend's grouped matmul in
   bfloat16; loss and gradient norm at each step against the float32 run (`dot` attention, the
   experts on row tiles).

    python tools/gpu_parity.py            # on the GPU machine; exit 1 when a figure is off
    python tools/gpu_parity.py --smoke    # any backend, small shapes (cudnn only on NVIDIA)

bfloat16 inputs land between 1e-3 and 1e-2 of a float32 reference; the tolerances below leave
room for that and catch a kernel that masks, scales or indexes wrongly (errors of order 1).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # runs from a clone without installing

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxtrain.commands import bench  # noqa: E402
from jaxtrain.config import loader as config_lib  # noqa: E402
from jaxtrain.hardware import backend  # noqa: E402
from jaxtrain.models.layers import grouped_matmul  # noqa: E402
from jaxtrain.models.mixers.attention import self_attention  # noqa: E402
from jaxtrain.models.spec.hyperparameters import ModelSpec  # noqa: E402

# Relative error allowed against the float32 reference.
ATTENTION_TOLERANCE = 2e-2  # bf16 inputs and outputs, float32 accumulation
# A model whose attention sees only the last 2 tokens is 1.3% off in loss and 17% in gradient
# norm at the first step of the smoke shape; bf16 blockwise attention, 5e-5 and 3e-4.
LOSS_TOLERANCE = 5e-3
GRAD_NORM_TOLERANCE = 2e-2
FP8_LOSS_TOLERANCE = 1e-2  # fp8 rounds the matmul inputs to 3 mantissa bits (e4m3)
FP8_GRAD_NORM_TOLERANCE = 0.1

# A train step small enough to compile in seconds, large enough to tile like the real ones.
MODEL = [
    "--config.model.num_layers=2",
    "--config.model.hidden_size=1024",
    "--config.model.num_heads=8",
    "--config.model.num_kv_heads=2",
    "--config.model.head_dim=128",
    "--config.model.intermediate_size=2816",
    "--config.model.vocab_size=32000",
    "--config.train.seq_len=2048",
    "--config.train.global_batch_size=4",
    "--config.model.remat=none",
]
# A constant, large rate without warmup: the loss falls from the first step on the fixed batch,
# so the steps compare a model that learns, not one that stays at ~ln(vocab).
OPTIMIZER = [
    "--config.optim.warmup_steps=0",
    "--config.optim.schedule=constant",
    "--config.optim.lr=3e-3",
]
SMOKE_MODEL = [*bench.TINY_SHAPE, "--config.model.remat=none"]
# The configs the train steps take: Llama 3.2, and Mixtral for the expert model.
LLAMA, MIXTRAL = "configs/llama3_2_1b.py", "configs/mixtral_8x7b.py"
# The expert model: Mixtral with the shape above, 8 experts of 1,024, top 2, in every layer.
EXPERTS = [
    "--config.model.num_experts=8",
    "--config.model.num_experts_per_tok=2",
    "--config.model.moe_intermediate_size=1024",
]
SMOKE_EXPERTS = [*EXPERTS[:2], "--config.model.moe_intermediate_size=64"]
# The float32 reference runs its experts on the portable row tiles.
REFERENCE_EXPERTS = ["--config.backend.grouped_matmul=tiles"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpu_parity", description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small shapes (any backend)")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args(argv)
    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({device.platform}); jax {jax.__version__}", flush=True)
    cudnn = backend.current().cudnn_attention
    impls = ["cudnn", "blockwise"] if cudnn else ["blockwise"]
    if not cudnn:
        print("cudnn: not checked (the backend does not pick it on this device)", flush=True)

    shape = (1, 256, 4, 2, 16) if args.smoke else (2, 2048, 16, 4, 128)
    groups_shape = (512, 64, 128, 4) if args.smoke else (8192, 1024, 2048, 8)
    model = (SMOKE_MODEL if args.smoke else MODEL) + OPTIMIZER
    experts = SMOKE_EXPERTS if args.smoke else EXPERTS
    sections = [
        *(functools.partial(_attention_rows, impls, shape, w) for w in (0, shape[1] // 4)),
        functools.partial(_grouped_matmul_rows, groups_shape),
        functools.partial(_train_rows, impls, model, args.steps),
        functools.partial(_expert_train_rows, model + experts, args.steps),
    ]
    # Rows print as each section ends, so a run stopped at a time limit still shows its checks.
    print("\n| check | figure | rel. error | tolerance | |")
    print("|---|---|---|---|---|", flush=True)
    checked = failed = 0
    for section in sections:
        for what, figure, error, tolerance in section():
            ok = bool(error <= tolerance)  # NaN fails
            checked, failed = checked + 1, failed + (not ok)
            print(
                f"| {what} | {figure} | {error:.2e} | {tolerance:.0e} | {'ok' if ok else 'OFF'} |"
            )
        sys.stdout.flush()
    print(f"\n{checked - failed} of {checked} within tolerance", flush=True)
    return 1 if failed else 0


def _relative(x: jax.Array, ref: jax.Array) -> float:
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def _attention_rows(
    impls: list[str], shape: tuple[int, int, int, int, int], window: int
) -> list[tuple[str, str, float, float]]:
    """Output and q/k/v gradients of each implementation against float32 `dot`."""
    b, l, n, k, h = shape
    keys = jax.random.split(jax.random.key(window), 4)
    q = jax.random.normal(keys[0], (b, l, n, h), jnp.bfloat16)
    kk = jax.random.normal(keys[1], (b, l, k, h), jnp.bfloat16)
    v = jax.random.normal(keys[2], (b, l, k, h), jnp.bfloat16)
    cotangent = jax.random.normal(keys[3], (b, l, n, h), jnp.float32)
    scale = h**-0.5

    def run(impl: str, dtype: str, q, kk, v, cotangent):
        spec = ModelSpec(attention_impl=impl, dtype=dtype, sliding_window=window)

        def attend(q, kk, v):
            return self_attention(spec, q, kk, v, None, scale)

        out, vjp = jax.vjp(attend, q, kk, v)
        return (out, *vjp(cotangent.astype(out.dtype)))

    with jax.default_matmul_precision("highest"):  # not TF32 on GPUs
        reference = jax.jit(lambda *x: run("dot", "float32", *x))(
            *(x.astype(jnp.float32) for x in (q, kk, v)), cotangent
        )
    label = f"attention {b}x{l}, {n}/{k} heads of {h}, " + (
        f"window {window}" if window else "causal"
    )
    rows = []
    for impl in impls:
        results = jax.jit(lambda *x, impl=impl: run(impl, "bfloat16", *x))(q, kk, v, cotangent)
        for name, got, ref in zip(("out", "dq", "dk", "dv"), results, reference):
            rows.append((f"{label}: {impl}", name, _relative(got, ref), ATTENTION_TOLERANCE))
    return rows


def _grouped_matmul_rows(shape: tuple[int, int, int, int]) -> list[tuple[str, str, float, float]]:
    """The backend's grouped matmul on bfloat16 rows in uneven groups (the last one empty):
    output, row and weight gradients against the row tiles on float32 copies."""
    rows_count, d, f, groups = shape
    keys = jax.random.split(jax.random.key(1), 4)
    x = jax.random.normal(keys[0], (rows_count, d), jnp.bfloat16)
    w = (jax.random.normal(keys[1], (groups, d, f), jnp.float32) * d**-0.5).astype(jnp.bfloat16)
    cotangent = jax.random.normal(keys[2], (rows_count, f), jnp.float32)
    # Uneven sizes summing to the rows, the last group empty.
    cuts = jnp.sort(jax.random.randint(keys[3], (groups - 2,), 1, rows_count))
    bounds = jnp.concatenate([jnp.array([0]), cuts, jnp.array([rows_count, rows_count])])
    sizes = jnp.diff(bounds).astype(jnp.int32)

    def run(matmul, x, w):
        out, vjp = jax.vjp(lambda x, w: matmul(x, w, sizes), x, w)
        return (out, *vjp(cotangent.astype(out.dtype)))

    with jax.default_matmul_precision("highest"):  # not TF32 on GPUs
        reference = jax.jit(lambda x, w: run(grouped_matmul.tiled, x, w))(
            x.astype(jnp.float32), w.astype(jnp.float32)
        )
    picked = backend.current().grouped_matmul
    results = jax.jit(lambda x, w: run(grouped_matmul.grouped_matmul, x, w))(x, w)
    label = f"grouped matmul {rows_count}x{d} by {groups}x{d}x{f}: {picked}, bf16"
    return [
        (label, name, _relative(got, ref), ATTENTION_TOLERANCE)
        for name, got, ref in zip(("out", "dx", "dw"), results, reference)
    ]


def _train_rows(
    impls: list[str], model: list[str], steps: int
) -> list[tuple[str, str, float, float]]:
    """Per-step loss and gradient norm of each variant against float32 `dot` attention."""
    variants = {f"{impl}, bf16": [f"--config.model.attention_impl={impl}"] for impl in impls}
    variants["fp8 matmuls"] = ["--config.model.quantization=fp8"]
    return _step_rows(LLAMA, model, [], variants, steps)


def _expert_train_rows(model: list[str], steps: int) -> list[tuple[str, str, float, float]]:
    """The expert model's steps with the backend's grouped matmul in bfloat16 against float32
    with the row tiles."""
    picked = backend.current().grouped_matmul
    return _step_rows(MIXTRAL, model, REFERENCE_EXPERTS, {f"experts ({picked}), bf16": []}, steps)


def _step_rows(
    config: str,
    model: list[str],
    reference_only: list[str],
    variants: dict[str, list[str]],
    steps: int,
) -> list[tuple[str, str, float, float]]:
    """Per-step loss and gradient norm of each variant (bfloat16) of `config` under `model`
    against the float32 `dot` attention run, which adds `reference_only` to the overrides."""
    with jax.default_matmul_precision("highest"):  # not TF32 on GPUs
        reference = _losses(
            config,
            model + reference_only + ["--config.model.attention_impl=dot", _dtype("float32")],
            steps,
        )
    rows = []
    for name, overrides in variants.items():
        fp8 = "fp8" in name
        got = _losses(config, model + overrides + [_dtype("bfloat16")], steps)
        for step, (figures, ref) in enumerate(zip(got, reference), start=1):
            for key in ("loss", "grad_norm"):
                tolerance = {
                    ("loss", False): LOSS_TOLERANCE,
                    ("loss", True): FP8_LOSS_TOLERANCE,
                    ("grad_norm", False): GRAD_NORM_TOLERANCE,
                    ("grad_norm", True): FP8_GRAD_NORM_TOLERANCE,
                }[key, fp8]
                error = abs(figures[key] - ref[key]) / abs(ref[key])
                figure = f"{key} {figures[key]:.4f} (ref {ref[key]:.4f})"
                rows.append((f"train step {step}: {name}", figure, error, tolerance))
    return rows


def _dtype(name: str) -> str:
    return f"--config.model.dtype={name}"


def _losses(config: str, overrides: list[str], steps: int) -> list[dict[str, float]]:
    """Loss and gradient norm of `steps` train steps of `config` under `overrides` on one fixed
    random batch."""
    cfg = config_lib.load_config(str(REPO / config), overrides)
    with bench.synthetic_trainer(cfg, steps + 1, jax.devices()[:1]) as trainer:
        batch = trainer.setup.global_batch(bench.synthetic_batch(cfg, trainer.spec.vocab_size))
        state, out = trainer.state, []
        for _ in range(steps):
            state, metrics = trainer.compiled_step(state, batch)
            out.append({k: float(metrics[k]) for k in ("loss", "grad_norm")})
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
