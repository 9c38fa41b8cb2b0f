"""`bench --experts`: the expert block alone, counted on the step's FLOP scale."""

from __future__ import annotations

import jax
import pytest
from conftest import REPO
from flax import nnx

from jaxtrain.commands import bench, bench_experts
from jaxtrain.config import loader as config_lib
from jaxtrain.errors import ConfigError
from jaxtrain.models.feedforward.moe import MoE
from jaxtrain.models.presets.registry import model_spec


@pytest.mark.parametrize(
    "preset", ["mixtral-debug", "deepseek-v3-debug", "gpt-oss-debug", "grok2-debug"]
)
def test_the_expert_blocks_flops_count_the_weights_a_token_multiplies_by(preset):
    """6 x the block's matmul weights a token meets: the router, k of the E experts, the
    shared experts and a residual MLP (counted from the built block's parameters, biases
    and router score bias aside), the count `ModelSpec.flops_per_token` adds per layer."""
    spec = model_spec(preset)
    block = nnx.eval_shape(lambda: MoE(spec, rngs=nnx.Rngs(0)))
    weights = 0.0
    for path, param in nnx.to_flat_state(nnx.state(block, nnx.Param)):
        name = "/".join(str(part) for part in path)
        if "bias" in name:  # added, not multiplied by
            continue
        routed = name in ("gate_proj", "up_proj", "down_proj")
        share = spec.num_experts_per_tok / spec.num_experts if routed else 1.0
        weights += share * param.value.size
    assert bench_experts.block_flops_per_token(spec) == pytest.approx(6.0 * weights, rel=1e-12)


def _mixtral_debug(*overrides: str):
    return config_lib.load_config(
        str(REPO / "configs" / "mixtral_debug.py"),
        ["--config.train.seq_len=32", "--config.train.global_batch_size=4", *overrides],
    )


def test_bench_times_the_expert_block_and_counts_it_per_micro_batch():
    cfg = _mixtral_debug("--config.train.micro_batch_size=2")
    figures = bench.benchmark(cfg, steps=2, warmup=1, devices=jax.devices()[:1], experts=True)
    spec = model_spec("mixtral-debug")
    assert figures["tokens"] == 2 * 32  # one micro batch's tokens go through the block
    assert figures["expert_blocks_per_step"] == spec.num_moe_layers * 2
    flops = bench_experts.block_flops_per_token(spec) * 2 * 32
    assert figures["block_flops_per_s"] == pytest.approx(flops / figures["block_time_s"])
    assert 0 < figures["block_mfu"] < 1
    line = bench.expert_report("mixtral-debug", figures)
    assert f"x {spec.num_moe_layers * 2} per step" in line and "% of the step" in line


def test_bench_experts_on_a_dense_model_stops_before_timing_and_says_what_to_do():
    cfg = config_lib.load_config(str(REPO / "configs" / "llama_debug.py"), [])
    with pytest.raises(ConfigError, match="no expert blocks: drop --experts"):
        bench.benchmark(cfg, steps=1, warmup=0, experts=True)
