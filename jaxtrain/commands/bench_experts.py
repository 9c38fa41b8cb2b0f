"""The expert block alone: one layer's mixture-of-experts feed-forward block, forward and
backward, on one device, with its FLOP/s and MFU.

An expert model's step is attention, the expert blocks and the rest; when its MFU is low,
this tells whether the expert path (router, dispatch, grouped matmuls, combine) is why. The
block is built from the run's model spec and backend, as the decoder builds it, and
differentiated with respect to its parameters and its input at the micro batch's token count.
The input is random, so the router spreads tokens about evenly over the experts.

FLOPs are 6 x tokens x the block's active matmul weights (the top-k routed experts, shared
experts, router; `block_sizes.expert_block_params`), as `ModelSpec.flops_per_token` counts
them, so the block's MFU reads on the same scale as the step's.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxtrain.errors import ConfigError
from jaxtrain.hardware import backend as backend_lib
from jaxtrain.models.feedforward.moe import MoE
from jaxtrain.models.spec import block_sizes
from jaxtrain.models.spec.hyperparameters import ModelSpec


def block_flops_per_token(spec: ModelSpec) -> float:
    """Training FLOPs per token of one expert block: 6 x its active matmul weights."""
    return 6.0 * block_sizes.expert_block_params(spec, spec.num_experts_per_tok, with_biases=False)


def require_experts(spec: ModelSpec) -> None:
    """ConfigError unless `spec` has expert blocks to time."""
    if not spec.num_experts:
        raise ConfigError(
            f"model family {spec.family!r} with model.num_experts=0 has no expert blocks: "
            "drop --experts, or bench an expert model (e.g. configs/mixtral_8x7b.py)."
        )


def time_expert_block(
    spec: ModelSpec,
    backend: backend_lib.Backend,
    batch: int,
    seq_len: int,
    peak_flops: float,
    steps: int = 10,
    warmup: int = 2,
    seed: int = 0,
) -> dict[str, float]:
    """Median seconds of one forward + backward of `spec`'s expert block over [batch, seq_len]
    tokens on the default device, and its FLOP/s and MFU against `peak_flops` (one device's)."""
    require_experts(spec)
    with backend_lib.use(backend):
        block = MoE(spec, rngs=nnx.Rngs(seed))
        graphdef, params, rest = nnx.split(block, nnx.Param, ...)
        rng = np.random.default_rng(seed)
        shape = (batch, seq_len, spec.hidden_size)
        x = jnp.asarray(rng.standard_normal(shape, np.float32), spec.jnp_dtype)
        cotangent = jnp.asarray(rng.standard_normal(shape, np.float32), spec.jnp_dtype)

        def loss(params, x):
            y, stats = nnx.merge(graphdef, params, rest)(x)
            return jnp.sum((y * cotangent).astype(jnp.float32)) + stats["aux_loss"]

        gradients = jax.jit(jax.grad(loss, argnums=(0, 1)))
        start = time.perf_counter()
        jax.block_until_ready(gradients(params, x))
        compile_s = time.perf_counter() - start
        for _ in range(warmup):
            jax.block_until_ready(gradients(params, x))
        seconds = []
        for _ in range(steps):
            start = time.perf_counter()
            jax.block_until_ready(gradients(params, x))
            seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    flops = block_flops_per_token(spec) * batch * seq_len
    return {
        "block_time_s": median,
        "block_flops_per_s": flops / median,
        "block_mfu": flops / median / peak_flops,
        "block_compile_s": compile_s,
        "tokens": float(batch * seq_len),
    }


def share_of_step(figures: dict[str, Any]) -> float:
    """What the step's expert blocks (`expert_blocks_per_step`: expert layers x micro
    batches), each taking `block_time_s`, take of its `step_time_s`, remat's recomputed
    forwards aside."""
    f = figures
    return f["expert_blocks_per_step"] * f["block_time_s"] / f["step_time_s"]


def format_report(name: str, figures: dict[str, Any]) -> str:
    """One line: the block's time, FLOP/s and MFU, and its share of the step (`share_of_step`)
    from the figures of `bench.benchmark(..., experts=True)`."""
    f = figures
    return (
        f"{name}: one expert block, {int(f['tokens']):,} tokens forward + backward: "
        f"{f['block_time_s'] * 1e3:.2f} ms, {f['block_flops_per_s'] / 1e9:,.1f} GFLOP/s, "
        f"MFU {f['block_mfu']:.1%}; x {int(f['expert_blocks_per_step'])} per step = "
        f"{share_of_step(f):.0%} of the step"
    )
