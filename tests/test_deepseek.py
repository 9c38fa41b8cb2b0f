"""DeepSeek V2 / V3 pieces: grouped routing, shared experts, the aux-free expert bias and its
update in the train step, latent attention with a cache, leading dense blocks, and training on
8 fake devices with expert x fsdp parallelism.

Shape letters: B batch, L length, T tokens, E experts, K top-k, G groups.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import training_helpers
from flax import nnx
from jax.sharding import PartitionSpec
from training_helpers import mesh as _mesh
from training_helpers import optim as _optim

from jaxtrain.checkpoint.manager import Checkpointer
from jaxtrain.errors import ConfigError
from jaxtrain.models import build_model
from jaxtrain.models.feedforward.moe import RouterBias, route
from jaxtrain.models.presets.registry import model_spec
from jaxtrain.parallel import sharding
from jaxtrain.train import optimizer, state

V2 = model_spec("deepseek-v2-debug", vocab_size=128, max_seq_len=64, init_std=0.2)
V3 = model_spec(
    "deepseek-v3-debug", vocab_size=128, max_seq_len=64, init_std=0.2, moe_bias_update_rate=0.01
)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            dict(num_experts_per_tok=9),
            "model.num_experts_per_tok=9 must be between 1 and model.num_experts=8",
        ),
        (dict(moe_n_group=3), "model.moe_n_group=3 must divide model.num_experts=8"),
        (
            dict(moe_topk_group=5),
            "model.moe_topk_group=5 must be between 1 and model.moe_n_group=4",
        ),
        (dict(moe_topk_group=1, num_experts_per_tok=3), "model.num_experts_per_tok=3 exceeds"),
        (dict(moe_topk_method="greedy"), "model.moe_n_group=4 has no effect"),
        (dict(moe_topk_method="best"), "model.moe_topk_method='best'"),
        (dict(moe_n_group=8, moe_topk_group=1, num_experts_per_tok=1), "'noaux_tc' ranks groups"),
        (dict(qk_rope_head_dim=7), "model.qk_rope_head_dim=7 must be a positive even number"),
        (dict(v_head_dim=0), "model.v_head_dim=0 must be a positive integer"),
        (dict(kv_lora_rank=0), "model.q_lora_rank=24 only applies to multi-head latent attention"),
        (dict(q_lora_rank=-1), "model.q_lora_rank=-1 is out of range: it must be >= 0"),
        (dict(qk_norm=True), "model.qk_norm=True is not supported with multi-head latent"),
        (dict(num_dense_layers=2), "model.num_dense_layers=2 must be between 0 and"),
        (dict(moe_score_bias=False), "model.moe_bias_update_rate=0.01 needs the expert bias"),
        (
            dict(moe_routed_scaling=0.0),
            "model.moe_routed_scaling=0.0 is out of range: it must be > 0",
        ),
        (dict(rope_original_max_len=0), "model.rope_original_max_len=0"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_bad_deepseek_keys_are_named(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dataclasses.replace(V3, **overrides).validate()


def test_dense_only_keys_need_their_feature():
    dense = model_spec("llama-debug")
    with pytest.raises(ConfigError, match="model.num_dense_layers=1 only applies"):
        dataclasses.replace(dense, num_dense_layers=1).validate()
    with pytest.raises(ConfigError, match="model.moe_layer_step=2 only applies"):
        dataclasses.replace(dense, moe_layer_step=2).validate()


def _numpy_route(logits_E, k, sigmoid, bias_E, method, n_group, topk_group, norm, scaling):
    """One token, written from the DeepSeek papers' description."""
    if sigmoid:
        scores = 1 / (1 + np.exp(-logits_E))
    else:
        scores = np.exp(logits_E - logits_E.max())
        scores /= scores.sum()
    choice = scores + bias_E
    groups = choice.reshape(n_group, -1)
    if method == "group_limited_greedy":
        group_scores = groups.max(-1)
    else:
        group_scores = np.sort(groups, -1)[:, -2:].sum(-1)
    kept = np.argsort(-group_scores)[:topk_group]
    masked = np.full_like(groups, -np.inf)
    masked[kept] = groups[kept]
    experts = np.argsort(-masked.reshape(-1))[:k]
    weights = scores[experts]
    if norm:
        weights = weights / weights.sum()
    return experts, weights * scaling


@pytest.mark.parametrize(
    "sigmoid, method, norm",
    [(False, "group_limited_greedy", False), (True, "noaux_tc", True), (True, "noaux_tc", False)],
)
def test_grouped_routing_matches_a_per_token_reference(sigmoid, method, norm):
    rng = np.random.default_rng(0)
    logits_TE = rng.normal(0, 2, (16, 8)).astype(np.float32)
    bias_E = rng.normal(0, 0.3, 8).astype(np.float32) if sigmoid else np.zeros(8, np.float32)
    weights_TK, experts_TK, probs_TE = route(
        jnp.asarray(logits_TE),
        3,
        "sigmoid" if sigmoid else "softmax_topk",
        norm,
        bias_E=jnp.asarray(bias_E) if sigmoid else None,
        topk_method=method,
        n_group=4,
        topk_group=2,
        scaling=2.5,
    )
    for t in range(16):
        experts, weights = _numpy_route(
            logits_TE[t].astype(np.float64), 3, sigmoid, bias_E, method, 4, 2, norm, 2.5
        )
        order = np.argsort(np.asarray(experts_TK[t]))
        np.testing.assert_array_equal(np.asarray(experts_TK[t])[order], np.sort(experts))
        np.testing.assert_allclose(
            np.asarray(weights_TK[t])[order], weights[np.argsort(experts)], rtol=1e-5
        )
    np.testing.assert_allclose(np.asarray(probs_TE).sum(-1), 1.0, rtol=1e-5)


def test_existing_moe_families_keep_their_parameter_tree():
    for name in ("mixtral-debug", "qwen3-moe-debug"):
        _, abstract = state.abstract_model(model_spec(name))
        paths = {".".join(map(str, p)) for p, _ in nnx.to_flat_state(abstract)}
        assert not any("dense_layers" in p or "shared" in p or "score_bias" in p for p in paths)
        assert "layers.mlp.gate_proj" in paths


def test_leading_dense_blocks_form_their_own_stack():
    model = build_model(V3)
    assert model.dense_layers.mlp.gate_proj.kernel.shape == (1, 64, 128)
    assert model.layers.mlp.gate_proj.shape == (1, 8, 64, 32)
    assert model.layers.mlp.shared.gate_proj.kernel.shape == (1, 64, 32)
    assert isinstance(model.layers.mlp.score_bias, RouterBias)
    assert model.layers.attn.kv_b_proj.kernel.shape == (1, 32, 4, 32)


@pytest.mark.parametrize(
    "spec", [V2, dataclasses.replace(V3, q_lora_rank=0)], ids=["v2", "v3-no-q-latent"]
)
def test_cached_decoding_matches_the_full_forward(spec):
    model = build_model(spec)
    tokens_BL = jnp.asarray(np.random.default_rng(0).integers(0, 128, (2, 10)), jnp.int32)
    full_BLV = model(tokens_BL)
    cache = model.init_cache(2, 16)
    assert set(cache) == {"k", "v", "dense_k", "dense_v"}
    h_BLD, cache = model.hidden_states(tokens_BL[:, :6], cache=cache, cache_index=0)
    outs = [model.logits(h_BLD)]
    for i in range(6, 10):
        h_BLD, cache = model.hidden_states(tokens_BL[:, i : i + 1], cache=cache, cache_index=i)
        outs.append(model.logits(h_BLD))
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full_BLV, atol=1e-4)


def test_remat_and_unrolled_layers_give_the_same_logits():
    tokens_BL = jnp.asarray(np.random.default_rng(0).integers(0, 128, (2, 8)), jnp.int32)
    reference = build_model(V3)(tokens_BL)
    for overrides in (dict(remat="full"), dict(scan_layers=False)):
        out = build_model(dataclasses.replace(V3, **overrides))(tokens_BL)
        np.testing.assert_allclose(out, reference, atol=1e-5)


def test_mla_flops_count_latent_projections_and_attention_widths():
    spec = V3
    d, n, c, r, p = 64, 4, 24, 32, 8
    q, v = 16 + p, 16
    attn = d * c + c * n * q + d * (r + p) + r * n * (16 + v) + n * v * d
    dense = 3 * d * 128
    moe = (2 + 1) * 3 * d * 32 + d * 8  # top-2 + one shared expert, plus the router
    matmul = 2 * attn + dense + moe + 128 * d
    assert spec.flops_per_token(32) == 6.0 * matmul + 3.0 * 2 * 2 * n * (q + v) * 32 / 2


def _train(spec, mesh, steps=2, lr=1e-2, num_micro=1):
    return training_helpers.train(spec, mesh, steps, _optim(lr), num_micro)


def _load(spec, params, batch):
    model = nnx.merge(state.abstract_model(spec)[0], params)
    return np.asarray(model.forward_with_stats(batch["inputs"])[1]["load"])


def test_aux_free_bias_moves_toward_balance_and_the_optimizer_never_sees_it():
    # lr = 0: only the bias changes, so any change in load is the bias's doing.
    steps = 6
    spec = dataclasses.replace(V3, moe_bias_update_rate=0.05)
    _, _, final, _, batch = _train(spec, _mesh(), steps=steps, lr=0.0)
    bias_LE = final["params"]["layers"]["mlp"]["score_bias"]
    assert bias_LE.shape == (1, 8)
    # Each step moves every expert's bias by exactly +-rate (or 0 at the mean).
    np.testing.assert_allclose(np.round(bias_LE / 0.05), bias_LE / 0.05, atol=1e-4)
    assert np.abs(bias_LE).max() > 0
    start = jax.tree.map(lambda x: x, final["params"])  # a copy of the dicts; lr 0 kept weights
    start["layers"]["mlp"]["score_bias"] = np.zeros_like(bias_LE)
    before, after = _load(spec, start, batch), _load(spec, final["params"], batch)
    assert np.std(after) < np.std(before)
    # The optimizer state holds no bias: nothing under score_bias, and one moment per Param.
    paths = [
        jax.tree_util.keystr(p)
        for p, _ in jax.tree_util.tree_flatten_with_path(final["opt_state"])[0]
    ]
    assert paths and not any("score_bias" in p for p in paths)
    _, metrics, _, _, _ = _train(spec, _mesh(), steps=1, lr=0.0, num_micro=2)
    assert np.isfinite(metrics["loss"])


def test_zero_rate_leaves_the_bias_and_the_step_trains_the_rest():
    spec = dataclasses.replace(V3, moe_bias_update_rate=0.0)
    losses, _, final, _, _ = _train(spec, _mesh(), steps=3)
    np.testing.assert_array_equal(final["params"]["layers"]["mlp"]["score_bias"], 0.0)
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("spec", [V2, V3], ids=["v2", "v3"])
def test_expert_parallel_deepseek_training_matches_one_device(spec):
    reference, ref_metrics, ref_state, _, _ = _train(spec, _mesh())
    sharded, metrics, sharded_state, param_shardings, _ = _train(
        spec, _mesh(ici_expert=4, ici_fsdp=2)
    )
    gate_spec = param_shardings["layers"]["mlp"]["gate_proj"].spec
    # The stacked dimension is named for pipeline stages (an axis of size 1 here).
    assert gate_spec == PartitionSpec("pipeline", "expert", "fsdp", "tensor")
    np.testing.assert_allclose(sharded, reference, rtol=2e-5)
    for key in ("moe_aux_loss", "moe_load_max", "moe_load_min"):
        np.testing.assert_allclose(metrics[key], ref_metrics[key], rtol=2e-5)
    if spec.moe_score_bias:
        np.testing.assert_allclose(
            sharded_state["params"]["layers"]["mlp"]["score_bias"],
            ref_state["params"]["layers"]["mlp"]["score_bias"],
        )


def test_checkpoint_saves_and_restores_the_expert_bias(tmp_path):
    _, _, trained, _, _ = _train(V3, _mesh(), steps=2)
    bias = trained["params"]["layers"]["mlp"]["score_bias"]
    assert np.abs(bias).max() > 0
    mesh, rules = _mesh(), sharding.RULE_PRESETS["fsdp_tensor"]
    tx = optimizer.make_optimizer(_optim(), 2)
    layout = state.state_layout(V3, tx, mesh, rules)
    writer = Checkpointer(tmp_path, async_save=False)
    writer.save(2, trained, None, {})
    writer.close()
    reader = Checkpointer(tmp_path, read_only=True, async_save=False)
    restored, _, _ = reader.restore(2, layout.abstract)
    np.testing.assert_array_equal(restored["params"]["layers"]["mlp"]["score_bias"], bias)
    reader.close()


def test_init_from_a_hugging_face_folder_keeps_the_bias_out_of_the_optimizer(tmp_path):
    pytest.importorskip("safetensors")
    from parity_helpers import random_params

    from jaxtrain.checkpoint import init_from
    from jaxtrain.interop.hf import save_hf_checkpoint

    spec = dataclasses.replace(V3, moe_bias_update_rate=0.0)
    params = random_params(spec)
    save_hf_checkpoint(spec, params, tmp_path)
    mesh, rules = _mesh(ici_expert=4, ici_fsdp=2), sharding.RULE_PRESETS["fsdp_tensor"]
    tx = optimizer.make_optimizer(_optim(), 2)
    with sharding.use_mesh(mesh, rules):
        layout = state.state_layout(V3, tx, mesh, rules)
        loaded, report = init_from.load_params(tmp_path, -1, V3, layout)
        train_state = init_from.initial_state(loaded, tx, layout)
    np.testing.assert_array_equal(
        train_state["params"]["layers"]["mlp"]["score_bias"], params["layers"]["mlp"]["score_bias"]
    )
    paths = [
        jax.tree_util.keystr(p)
        for p, _ in jax.tree_util.tree_flatten_with_path(train_state["opt_state"])[0]
    ]
    assert paths and not any("score_bias" in p for p in paths)
    assert "init_from: loaded" in report
