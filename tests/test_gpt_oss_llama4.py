"""gpt-oss and Llama 4 pieces: per-layer attention kinds in one scanned stack, interleaved
dense / expert stacks, the clamped SwiGLU, top-k sigmoid routing on the expert input, cached
decoding, bad keys named, and training on 8 fake devices with expert x fsdp parallelism.

Shape letters: B batch, L length, T tokens, D embed, E experts, F expert hidden, K top-k.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec
from training_helpers import mesh as _mesh
from training_helpers import train as _train

from jaxtrain.errors import ConfigError
from jaxtrain.models import build_model
from jaxtrain.models.feedforward.moe import clamped_swiglu, route
from jaxtrain.models.presets.registry import model_spec
from jaxtrain.models.spec.layer_pattern import attention_kinds, stack_layer_indices

GPT_OSS = model_spec(
    "gpt-oss-debug", vocab_size=128, max_seq_len=64, init_std=0.2, attention_block=8
)
LLAMA4 = model_spec(
    "llama4-debug",
    vocab_size=128,
    max_seq_len=64,
    init_std=0.2,
    attention_block=8,
    attention_chunk=8,
)


@pytest.mark.parametrize(
    "spec, overrides, message",
    [
        (GPT_OSS, dict(global_layer_step=1), "model.global_layer_step=1 makes every layer global"),
        (
            GPT_OSS,
            dict(global_layer_step=-2),
            "model.global_layer_step=-2 is out of range: it must be >= 0",
        ),
        (GPT_OSS, dict(attention_chunk=4), "model.attention_chunk=4 and model.sliding_window=8"),
        (GPT_OSS, dict(moe_activation="gelu"), "model.moe_activation='gelu' is not one of"),
        (
            GPT_OSS,
            dict(moe_swiglu_limit=0.0),
            "model.moe_swiglu_limit=0.0 is out of range: it must be > 0",
        ),
        (GPT_OSS, dict(num_experts=0), "model.moe_router_bias=True only applies to a mixture"),
        (LLAMA4, dict(global_layer_step=0), "model.nope_global=True needs global layers"),
        (LLAMA4, dict(nope_global=False), "model.attn_temperature_tuning=True applies to NoPE"),
        (
            LLAMA4,
            dict(attn_floor_scale=0.0),
            "model.attn_floor_scale=0.0 is out of range: it must be > 0",
        ),
        (LLAMA4, dict(moe_layer_step=3), "model.moe_layer_step=3 must be a positive divisor"),
        (LLAMA4, dict(num_dense_layers=1), "model.moe_layer_step=2 and model.num_dense_layers=1"),
        (LLAMA4, dict(moe_score_bias=True), "model.moe_score='topk_sigmoid' ranks raw logits"),
        (
            model_spec("deepseek-v3-debug"),
            dict(attention_sinks=True),
            "model.attention_sinks=True is not supported with multi-head latent attention",
        ),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_bad_keys_are_named(spec, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dataclasses.replace(spec, **overrides).validate()


def test_layer_patterns_and_stacks():
    kinds, per_layer = attention_kinds(model_spec("gpt-oss-20b"))
    assert [k.window for k in kinds] == [128, 0] and per_layer[:4] == (0, 1, 0, 1)
    kinds, per_layer = attention_kinds(model_spec("llama4-maverick-17b-128e"))
    assert per_layer[:8] == (0, 0, 0, 1, 0, 0, 0, 1)
    assert (kinds[0].chunk, kinds[0].rope, kinds[1].rope, kinds[1].temperature) == (
        8192,
        True,
        False,
        True,
    )
    stacks = stack_layer_indices(model_spec("llama4-maverick-17b-128e"))
    assert stacks["layers"][:3] == [1, 3, 5] and stacks["dense_layers"][:3] == [0, 2, 4]
    assert set(stack_layer_indices(model_spec("llama4-scout-17b-16e"))) == {"layers"}
    # Every other family keeps one kind, so its blocks never switch.
    assert len(attention_kinds(model_spec("mistral-7b"))[0]) == 1


def test_interleaved_stacks_hold_their_own_shapes():
    model = build_model(dataclasses.replace(LLAMA4, num_layers=6, moe_layer_step=3))
    assert model.dense_layers.mlp.gate_proj.kernel.shape == (4, 64, 128)
    assert model.layers.mlp.gate_proj.shape == (2, 4, 64, 32)
    assert model.layers.mlp.shared.gate_proj.kernel.shape == (2, 64, 32)
    gpt = build_model(GPT_OSS)
    assert gpt.layers.attn.sinks.shape == (2, 4)
    assert gpt.layers.attn.o_proj.bias.shape == (2, 64)
    assert gpt.layers.mlp.gate_bias.shape == (2, 4, 32)
    assert gpt.layers.mlp.router.bias.shape == (2, 4)


def test_clamped_swiglu_is_gpt_oss_activation():
    gate = jnp.asarray([-9.0, -1.0, 0.5, 3.0, 9.0])
    up = jnp.asarray([-9.0, 2.0, -0.5, 8.0, 1.0])
    g, u = np.minimum(np.asarray(gate), 7.0), np.clip(np.asarray(up), -7.0, 7.0)
    want = (u + 1) * g / (1 + np.exp(-1.702 * g))
    np.testing.assert_allclose(clamped_swiglu(gate, up, 1.702, 7.0), want, rtol=1e-6)


def test_topk_sigmoid_routing_weights_the_expert_input():
    rng = np.random.default_rng(0)
    logits_TE = rng.normal(0, 2, (16, 4)).astype(np.float32)
    weights_TK, experts_TK, _ = route(jnp.asarray(logits_TE), 1, "topk_sigmoid", False)
    np.testing.assert_array_equal(experts_TK[:, 0], logits_TE.argmax(-1))
    np.testing.assert_allclose(weights_TK[:, 0], 1 / (1 + np.exp(-logits_TE.max(-1))), rtol=1e-6)
    # One expert block: y = shared(x) + expert_e(w x), e the top expert, as a loop per token.
    model = build_model(dataclasses.replace(LLAMA4, num_layers=2))
    x_BLD = jnp.asarray(rng.normal(0, 1, (1, 6, 64)), jnp.float32)
    graphdef, state = nnx.split(model.layers.mlp)
    block = nnx.merge(graphdef, jax.tree.map(lambda t: t[0], state))
    y_BLD, _ = block(x_BLD)
    logits = np.asarray(x_BLD[0] @ block.router.kernel[...])
    for t in range(6):
        e = int(logits[t].argmax())
        xin = np.asarray(x_BLD[0, t]) / (1 + np.exp(-logits[t, e]))
        h = jax.nn.silu(xin @ block.gate_proj[e]) * (xin @ block.up_proj[e])
        want = h @ block.down_proj[e] + block.shared(x_BLD[:, t : t + 1])[0, 0]
        np.testing.assert_allclose(y_BLD[0, t], want, atol=1e-4)


@pytest.mark.parametrize(
    "spec",
    [
        GPT_OSS,
        LLAMA4,
        dataclasses.replace(LLAMA4, num_layers=6, moe_layer_step=3, global_layer_step=3),
    ],
    ids=["gpt-oss", "llama4", "llama4-step3"],
)
def test_cached_decoding_matches_the_full_forward(spec):
    model = build_model(spec)
    tokens_BL = jnp.asarray(np.random.default_rng(0).integers(0, 128, (2, 24)), jnp.int32)
    full_BLV = model(tokens_BL)
    cache = model.init_cache(2, 32)
    h_BLD, cache = model.hidden_states(tokens_BL[:, :13], cache=cache, cache_index=0)
    outs = [model.logits(h_BLD)]
    for i in range(13, 24):
        h_BLD, cache = model.hidden_states(tokens_BL[:, i : i + 1], cache=cache, cache_index=i)
        outs.append(model.logits(h_BLD))
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full_BLV, atol=1e-4)


@pytest.mark.parametrize("spec", [GPT_OSS, LLAMA4], ids=["gpt-oss", "llama4"])
def test_remat_and_unrolled_layers_give_the_same_logits(spec):
    tokens_BL = jnp.asarray(np.random.default_rng(0).integers(0, 128, (2, 20)), jnp.int32)
    reference = build_model(spec)(tokens_BL)
    for overrides in (dict(remat="full"), dict(scan_layers=False), dict(attention_impl="dot")):
        out = build_model(dataclasses.replace(spec, **overrides))(tokens_BL)
        np.testing.assert_allclose(out, reference, atol=1e-5)


@pytest.mark.parametrize(
    "spec", [GPT_OSS, dataclasses.replace(LLAMA4, remat="full")], ids=["gpt-oss", "llama4"]
)
def test_expert_parallel_training_matches_one_device(spec):
    reference, ref_metrics, _, _, _ = _train(spec, _mesh())
    sharded, metrics, _, param_shardings, _ = _train(spec, _mesh(ici_expert=4, ici_fsdp=2))
    gate_spec = param_shardings["layers"]["mlp"]["gate_proj"].spec
    # The stacked dimension is named for pipeline stages (an axis of size 1 here).
    assert gate_spec == PartitionSpec("pipeline", "expert", "fsdp", "tensor")
    assert reference[-1] < reference[0]
    np.testing.assert_allclose(sharded, reference, rtol=2e-5)
    for key in ("moe_aux_loss", "moe_load_max", "moe_load_min"):
        np.testing.assert_allclose(metrics[key], ref_metrics[key], rtol=2e-5)
