"""The mixture-of-experts block: routing, grouped expert matmuls, router losses, expert parallelism.

Shape letters: B batch, L length, D embed, E experts, K top-k, F expert hidden, T tokens.
"""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import training_helpers
from flax import nnx
from jax.sharding import PartitionSpec
from ml_collections import ConfigDict
from training_helpers import mesh as _mesh

from jaxtrain.config import mesh_check
from jaxtrain.errors import ConfigError
from jaxtrain.models import ModelSpec, build_model
from jaxtrain.models.feedforward.moe import MoE, load_balancing_loss, route, router_z_loss
from jaxtrain.models.presets.registry import model_spec
from jaxtrain.parallel import sharding
from jaxtrain.train import step

SPEC = ModelSpec(
    vocab_size=128,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    max_seq_len=64,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=24,
    moe_aux_loss_coef=0.01,
    moe_z_loss_coef=0.001,
    init_std=0.2,
)


def _naive_moe(
    moe: MoE, x_TD: np.ndarray, score: str, norm_topk: bool, capacity: int | None = None
) -> np.ndarray:
    """One token at a time: transformers' routing (softmax over all experts, top-k, then
    renormalised for Mixtral and for Qwen with norm_topk), each chosen expert run densely;
    with a `capacity`, an expert ignores tokens once it has taken that many."""
    taken = np.zeros(moe.gate_proj.shape[0], int)
    router_DE = np.asarray(moe.router.kernel[...], np.float64)
    gate_EDF, up_EDF, down_EFD = (
        np.asarray(p[...], np.float64) for p in (moe.gate_proj, moe.up_proj, moe.down_proj)
    )
    out_TD = np.zeros_like(x_TD, np.float64)
    for t, x_D in enumerate(np.asarray(x_TD, np.float64)):
        logits_E = x_D @ router_DE
        probs_E = np.exp(logits_E - logits_E.max())
        probs_E /= probs_E.sum()
        chosen_K = np.argsort(-probs_E)[: moe.k]
        weights_K = probs_E[chosen_K]
        if score == "topk_softmax" or norm_topk:
            weights_K = weights_K / weights_K.sum()
        for e, w in zip(chosen_K, weights_K):
            taken[e] += 1
            if capacity is not None and taken[e] > capacity:
                continue
            g_F, u_F = x_D @ gate_EDF[e], x_D @ up_EDF[e]
            out_TD[t] += w * ((g_F / (1 + np.exp(-g_F)) * u_F) @ down_EFD[e])
    return out_TD


@pytest.mark.parametrize(
    "score, norm_topk", [("topk_softmax", True), ("softmax_topk", True), ("softmax_topk", False)]
)
def test_moe_layer_matches_a_per_token_loop(score, norm_topk):
    spec = dataclasses.replace(SPEC, moe_score=score, moe_norm_topk=norm_topk)
    moe = MoE(spec, rngs=nnx.Rngs(params=0))
    x_BLD = jax.random.normal(jax.random.key(1), (2, 7, spec.hidden_size))
    y_BLD, stats = moe(x_BLD)
    ref_TD = _naive_moe(moe, np.asarray(x_BLD).reshape(14, -1), score, norm_topk)
    np.testing.assert_allclose(np.asarray(y_BLD).reshape(14, -1), ref_TD, atol=1e-5, rtol=1e-5)
    assert stats["load"].shape == (spec.num_experts,)
    np.testing.assert_allclose(float(jnp.sum(stats["load"])), 1.0, rtol=1e-6)


@pytest.mark.parametrize("factor", [0.5, 1.0, 4.0])
def test_capacity_drops_an_experts_assignments_past_its_capacity_in_token_order(factor):
    spec = dataclasses.replace(SPEC, moe_score="softmax_topk", moe_capacity_factor=factor)
    moe = MoE(spec, rngs=nnx.Rngs(params=0))
    x_BLD = jax.random.normal(jax.random.key(1), (2, 7, spec.hidden_size))
    y_BLD, stats = moe(x_BLD)
    capacity = int(np.ceil(factor * 14 * spec.num_experts_per_tok / spec.num_experts))
    ref_TD = _naive_moe(moe, np.asarray(x_BLD).reshape(14, -1), "softmax_topk", True, capacity)
    np.testing.assert_allclose(np.asarray(y_BLD).reshape(14, -1), ref_TD, atol=1e-5, rtol=1e-5)
    # Four times the even share never drops; half of it must.
    assert (float(stats["dropped"]) == 0.0) == (factor == 4.0)


def test_capacity_path_trains_and_reports_dropped_assignments():
    spec = dataclasses.replace(SPEC, moe_capacity_factor=0.5)
    model = build_model(spec)
    graphdef, params = nnx.split(model)
    tokens = jax.random.randint(jax.random.key(2), (2, 16), 0, spec.vocab_size)
    batch = {"inputs": tokens, "targets": tokens, "loss_mask": jnp.ones((2, 16))}
    (loss, aux), grads = jax.value_and_grad(step.loss_sums, argnums=1, has_aux=True)(
        graphdef, params, batch, 0.0
    )
    assert np.isfinite(float(loss))
    assert 0.0 < float(aux["moe_dropped_sum"] / aux["tokens"]) < 1.0
    gate_grad = grads["layers"]["mlp"]["gate_proj"]
    assert float(jnp.sum(jnp.abs(gate_grad))) > 0.0


def test_negative_capacity_factor_is_named():
    with pytest.raises(ConfigError, match="model.moe_capacity_factor=-1"):
        dataclasses.replace(SPEC, moe_capacity_factor=-1.0).validate()


def test_router_losses_follow_their_formulas():
    # Four tokens, three experts, top-1: expert 0 gets two tokens, experts 1 and 2 one each.
    probs_TE = jnp.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])
    experts_TK = jnp.array([[0], [0], [1], [2]])
    aux, load_E = load_balancing_loss(probs_TE, experts_TK)
    f_E = np.array([2, 1, 1]) / 4
    p_E = np.array([1.6, 1.1, 1.3]) / 4
    np.testing.assert_allclose(load_E, f_E, rtol=1e-6)
    np.testing.assert_allclose(float(aux), 3 * np.sum(f_E * p_E), rtol=1e-6)
    # A perfectly even router scores exactly 1 whatever k.
    even, _ = load_balancing_loss(jnp.full((4, 4), 0.25), jnp.array([[0, 1], [2, 3]] * 2))
    np.testing.assert_allclose(float(even), 1.0, rtol=1e-6)
    logits_TE = jnp.array([[0.0, 0.0], [np.log(3.0), 0.0]])
    np.testing.assert_allclose(
        float(router_z_loss(logits_TE)), (np.log(2.0) ** 2 + np.log(4.0) ** 2) / 2, rtol=1e-6
    )


def test_routing_modes_differ_only_where_they_should():
    logits_TE = jnp.array([[2.0, 1.0, 0.0, -1.0]])
    w_mixtral, e_mixtral, _ = route(logits_TE, 2, "topk_softmax", True)
    w_norm, e_norm, _ = route(logits_TE, 2, "softmax_topk", True)
    w_raw, _, probs_TE = route(logits_TE, 2, "softmax_topk", False)
    np.testing.assert_array_equal(e_mixtral, [[0, 1]])
    np.testing.assert_array_equal(e_norm, [[0, 1]])
    np.testing.assert_allclose(w_mixtral, w_norm, rtol=1e-6)  # the same maths, two orders
    np.testing.assert_allclose(w_raw, probs_TE[:, :2], rtol=1e-6)
    assert float(jnp.sum(w_raw)) < 1.0


def test_moe_keys_are_validated_by_name():
    with pytest.raises(ConfigError, match="num_experts_per_tok=5.*num_experts=4"):
        dataclasses.replace(SPEC, num_experts_per_tok=5).validate()
    with pytest.raises(ConfigError, match="moe_intermediate_size"):
        dataclasses.replace(SPEC, moe_intermediate_size=0).validate()
    with pytest.raises(ConfigError, match="moe_score"):
        dataclasses.replace(SPEC, moe_score="sparsemax").validate()


def test_active_params_and_flops_count_top_k_experts():
    d, f = SPEC.hidden_size, SPEC.moe_intermediate_size
    unused = SPEC.num_layers * (SPEC.num_experts - SPEC.num_experts_per_tok) * 3 * d * f
    assert SPEC.num_params() - SPEC.num_active_params() == unused
    everything = dataclasses.replace(SPEC, num_experts_per_tok=SPEC.num_experts)
    assert everything.flops_per_token(16) - SPEC.flops_per_token(16) == 6.0 * unused


def _train(mesh, steps=2, num_micro=1):
    """Losses, last metrics and expert weight sharding of a few steps on one fixed batch."""
    optim = ConfigDict(
        dict(
            lr=1e-2,
            min_lr=1e-3,
            schedule="cosine",
            warmup_steps=1,
            decay_steps=0,
            weight_decay=0.1,
            b1=0.9,
            b2=0.95,
            eps=1e-8,
            clip_grad_norm=1.0,
        )
    )
    losses, metrics, _, param_shardings, _ = training_helpers.train(
        SPEC, mesh, steps, optim, num_micro
    )
    return losses, metrics, param_shardings["layers"]["mlp"]["gate_proj"].spec


def test_expert_parallel_training_matches_one_device():
    # Expert weights split four ways over `expert`, everything else over `fsdp`; XLA inserts
    # the collectives, and the result must not depend on the split.
    reference, ref_metrics, _ = _train(_mesh())
    sharded, metrics, gate_spec = _train(_mesh(ici_expert=4, ici_fsdp=2))
    # The stacked dimension is named for pipeline stages (an axis of size 1 here).
    assert gate_spec == PartitionSpec("pipeline", "expert", "fsdp", "tensor")
    np.testing.assert_allclose(sharded, reference, rtol=2e-5)
    for key in ("moe_aux_loss", "moe_z_loss", "moe_load_max", "moe_load_min"):
        np.testing.assert_allclose(metrics[key], ref_metrics[key], rtol=2e-5)
    assert 0.0 <= metrics["moe_load_min"] <= 1 / SPEC.num_experts <= metrics["moe_load_max"]
    assert metrics["moe_aux_loss"] >= 1.0 - 1e-6  # E * sum f p is smallest when balanced


# Each device routes its own tokens (feedforward/expert_dispatch.py): with the batch split over
# data, with gathered fsdp weights, tensor-split expert columns (summed), experts split over an
# axis that also splits the batch (tokens gathered, outputs reduce-scattered) or over `context`.
GPT_OSS = model_spec("gpt-oss-debug", vocab_size=128, max_seq_len=64, init_std=0.2)


@pytest.mark.parametrize(
    "spec, sizes, rules",
    [
        (SPEC, dict(ici_data=8), "data"),
        (SPEC, dict(ici_fsdp=4, ici_tensor=2), "fsdp_tensor"),
        (SPEC, dict(ici_expert=2, ici_tensor=2, ici_data=2), "fsdp_tensor"),
        (SPEC, dict(ici_expert=4, ici_context=2), "fsdp_tensor"),
        # Expert biases, the down projection's added once over `tensor`.
        (GPT_OSS, dict(ici_expert=2, ici_tensor=2, ici_fsdp=2), "fsdp_tensor"),
    ],
    ids=["data", "fsdp-tensor", "expert-tensor-data", "expert-context", "gpt-oss-tensor"],
)
def test_experts_on_each_devices_tokens_train_like_one_device(spec, sizes, rules):
    reference, ref_metrics, *_ = training_helpers.train(spec, _mesh())
    sharded, metrics, *_ = training_helpers.train(spec, _mesh(**sizes), rules=rules)
    assert reference[-1] < reference[0]
    np.testing.assert_allclose(sharded, reference, rtol=2e-5)
    for key in ("moe_aux_loss", "moe_z_loss", "moe_load_max", "moe_load_min"):
        np.testing.assert_allclose(metrics[key], ref_metrics[key], rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize(
    "sizes, rules",
    [(dict(ici_data=8), "data"), (dict(ici_expert=2, ici_tensor=2, ici_data=2), "fsdp_tensor")],
    ids=["data", "expert-tensor-data"],
)
def test_capacity_is_per_device_and_drops_nothing_when_it_holds_everything(sizes, rules):
    """A capacity of every assignment (factor E) drops nothing, so any mesh trains like one
    device; a tight one drops on each device's own tokens and says how many."""
    roomy = dataclasses.replace(SPEC, moe_capacity_factor=float(SPEC.num_experts))
    reference, ref_metrics, *_ = training_helpers.train(roomy, _mesh())
    sharded, metrics, *_ = training_helpers.train(roomy, _mesh(**sizes), rules=rules)
    np.testing.assert_allclose(sharded, reference, rtol=2e-5)
    assert metrics["moe_dropped"] == ref_metrics["moe_dropped"] == 0.0
    tight = dataclasses.replace(SPEC, moe_capacity_factor=0.5)
    _, metrics, *_ = training_helpers.train(tight, _mesh(**sizes), rules=rules, steps=1)
    # Half an even share per expert: at least half of the assignments go.
    assert 0.5 <= metrics["moe_dropped"] < 1.0


@pytest.mark.parametrize("capacity_factor", [0.0, 1.25], ids=["dropless", "capacity"])
def test_data_parallel_experts_move_no_tokens(capacity_factor):
    """Split over `data`, a step's only collective is the gradients' (and metrics') all-reduce:
    no device gathers another's tokens or router logits to route them."""
    spec = dataclasses.replace(SPEC, moe_capacity_factor=capacity_factor)
    text = training_helpers.compiled_step_text(spec, _mesh(ici_data=8), rules="data")
    moved = re.findall(
        r"(all-gather|all-to-all|reduce-scatter|collective-permute)(?:-start)?\(", text
    )
    assert moved == []
    assert "all-reduce" in text


def test_micro_batched_step_reports_router_metrics():
    _, metrics, _ = _train(_mesh(), steps=1, num_micro=2)
    for key in ("moe_aux_loss", "moe_z_loss", "moe_load_max", "moe_load_min"):
        assert np.isfinite(metrics[key]) and metrics[key] > 0, key


def test_router_losses_are_added_to_the_training_loss():
    decoder = build_model(SPEC)
    graphdef, params = nnx.split(decoder, nnx.Param)
    toks = np.random.default_rng(0).integers(0, SPEC.vocab_size, (2, 9))
    batch = {
        "inputs": jnp.asarray(toks[:, :-1], jnp.int32),
        "targets": jnp.asarray(toks[:, 1:], jnp.int32),
        "loss_mask": jnp.ones((2, 8), jnp.float32),
    }
    loss, aux = step.loss_sums(graphdef, nnx.to_pure_dict(params), batch, 0.0)
    _, stats = decoder.forward_with_stats(batch["inputs"])
    penalty = SPEC.moe_aux_loss_coef * jnp.mean(
        stats["aux_loss"]
    ) + SPEC.moe_z_loss_coef * jnp.mean(stats["z_loss"])
    np.testing.assert_allclose(float(loss), float(aux["ce_sum"] + penalty * 16), rtol=1e-6)
    assert stats["load"].shape == (SPEC.num_layers, SPEC.num_experts)


def test_expert_count_must_divide_over_the_expert_axis():
    with pytest.raises(sharding.MeshError, match="model.num_experts=4 .* 8 shards .*'expert'"):
        mesh_check.check_fits_mesh(
            SPEC, _mesh(ici_expert=8), sharding.RULE_PRESETS["fsdp"], seq_len=16, micro_batch=8
        )
