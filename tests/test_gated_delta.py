"""Gated DeltaNet: the chunked delta rule against the step-by-step recurrence, the mixer against
a NumPy layer written from the paper's definition (FLA / Zebra-Llama layout) and against
transformers' Qwen3Next layer, and decoding against the whole-sequence pass."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from delta_reference import (
    causal_conv,
    l2norm,
    load,
    naive_delta_rule,
    randomize,
    rmsnorm,
    sigmoid,
    silu,
    softplus,
)
from flax import nnx

from jaxtrain.errors import ConfigError
from jaxtrain.models.mixers import delta_rule, gated_delta
from jaxtrain.models.spec import delta_sizes
from jaxtrain.models.spec.hyperparameters import ModelSpec

SPEC = ModelSpec(
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=4,
    head_dim=8,
    intermediate_size=64,
    vocab_size=64,
    norm_eps=1e-6,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=8,
    linear_chunk=8,
)
LENGTH = 21  # not a multiple of the chunk: the padded tail must not change anything


@nnx.jit
def _run(model, x, segment=None):
    """The mixer's whole-sequence output, compiled once per shape (eager dispatch of the
    chunked rule's many small ops is what would be slow)."""
    return model(x, segment)


def _inputs(seed: int = 0, length: int = LENGTH) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 1.0, (2, length, SPEC.hidden_size))


def _mixer(spec: ModelSpec = SPEC, seed: int = 0) -> tuple[gated_delta.GatedDeltaNet, dict]:
    model = gated_delta.GatedDeltaNet(spec, rngs=nnx.Rngs(params=seed))
    return model, randomize(model, seed)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("packed", [False, True])
def test_chunked_delta_rule_matches_recurrence(per_channel, packed):
    rng = np.random.default_rng(3)
    b, length, h, k, v = 2, LENGTH, 3, 8, 5
    q = l2norm(rng.normal(size=(b, length, h, k))) * k**-0.5
    key = l2norm(rng.normal(size=(b, length, h, k)))
    val = rng.normal(size=(b, length, h, v))
    beta = sigmoid(rng.normal(size=(b, length, h)))
    # Strong decays too: a chunk's cumulative decay reaches far below float32's exp range.
    g = -softplus(rng.normal(2.0, 2.0, (b, length, h, k) if per_channel else (b, length, h)))
    segment = np.array([[0] * 7 + [1] * 9 + [2] * 5, [4] * length]) if packed else None
    state = None if packed else rng.normal(size=(b, h, k, v))
    want, want_state = naive_delta_rule(q, key, val, g, beta, segment, state)
    got, got_state = delta_rule.chunked_delta_rule(
        *(jnp.asarray(x, jnp.float32) for x in (q, key, val, g, beta)),
        chunk=4,
        state_BHKV=None if state is None else jnp.asarray(state, jnp.float32),
        segment_BL=None if segment is None else jnp.asarray(segment),
    )
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got_state), want_state, atol=1e-5)


def naive_gdn(p: dict, x: np.ndarray, spec: ModelSpec) -> np.ndarray:
    """Gated DeltaNet from the definition, FLA's layout (separate projections and convs)."""
    n, h = spec.linear_num_key_heads, spec.linear_num_value_heads
    kd = spec.linear_key_head_dim

    def proj(name):
        w = p[name]["kernel"]
        return np.einsum("bld,d...->bl...", x, w)

    def conv(name, y):
        if not spec.linear_short_conv:
            return silu(y)
        w = p[name]["weight"]
        flat = causal_conv(y.reshape(*y.shape[:2], -1), w.reshape(w.shape[0], -1))
        return flat.reshape(y.shape)

    q = l2norm(conv("q_conv", proj("q_proj"))) * kd**-0.5
    k = l2norm(conv("k_conv", proj("k_proj")))
    v = conv("v_conv", proj("v_proj"))
    q, k = (np.repeat(t, h // n, axis=2) for t in (q, k))
    beta = sigmoid(proj("b_proj"))
    g = -np.exp(p["A_log"]) * softplus(proj("a_proj") + p["dt_bias"])
    o, _ = naive_delta_rule(q, k, v, g, beta)
    o = rmsnorm(o, p["o_norm"]["scale"], spec.norm_eps)
    if spec.linear_output_gate:
        o = o * silu(proj("g_proj"))
    return np.einsum("blhv,hvd->bld", o, p["o_proj"]["kernel"])


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"linear_output_gate": False},
        {"linear_short_conv": False},
        {"linear_num_value_heads": 2, "linear_chunk": 64},
    ],
)
def test_mixer_matches_definition(variant):
    spec = dataclasses.replace(SPEC, **variant)
    model, params = _mixer(spec)
    assert hasattr(model, "g_proj") == spec.linear_output_gate
    assert hasattr(model, "q_conv") == spec.linear_short_conv
    x = _inputs()
    got = _run(model, jnp.asarray(x, jnp.float32))
    assert got.shape == x.shape
    np.testing.assert_allclose(np.asarray(got), naive_gdn(params, x, spec), atol=1e-4)


def _qwen3_next_layer(spec: ModelSpec):
    """transformers' Qwen3Next Gated DeltaNet layer of `spec`'s sizes, weights drawn at a
    scale where every one matters."""
    torch = pytest.importorskip("torch")
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next import modeling_qwen3_next as qn

    config = Qwen3NextConfig(
        hidden_size=spec.hidden_size,
        linear_num_key_heads=spec.linear_num_key_heads,
        linear_num_value_heads=spec.linear_num_value_heads,
        linear_key_head_dim=spec.linear_key_head_dim,
        linear_value_head_dim=spec.linear_value_head_dim,
        linear_conv_kernel_dim=spec.linear_conv_kernel,
        rms_norm_eps=spec.norm_eps,
        num_hidden_layers=1,
        layer_types=["linear_attention"],
    )
    torch.manual_seed(0)
    layer = qn.Qwen3NextGatedDeltaNet(config, layer_idx=0).float().eval()
    with torch.no_grad():
        for name, param in layer.named_parameters():
            if name == "norm.weight":
                param.uniform_(0.5, 1.5)
            elif name == "conv1d.weight":
                param.normal_(0.0, 0.4)
            elif name == "dt_bias":
                param.normal_(0.0, 1.0)
            elif name != "A_log":  # A_log keeps its U(0.01, 16) init
                param.normal_(0.0, 0.2)
    return layer


def params_from_qwen3_next(layer, spec: ModelSpec) -> dict:
    """Qwen3Next's fused, per-key-head-grouped weights split into the mixer's separate ones."""
    n, h = spec.linear_num_key_heads, spec.linear_num_value_heads
    kd, vd, group = spec.linear_key_head_dim, spec.linear_value_head_dim, h // n
    d = spec.hidden_size
    t = {name: p.detach().numpy().astype(np.float64) for name, p in layer.named_parameters()}
    qkvz = t["in_proj_qkvz.weight"].T.reshape(d, n, 2 * kd + 2 * group * vd)
    q, k, v, z = np.split(qkvz, np.cumsum([kd, kd, group * vd]), axis=-1)
    ba = t["in_proj_ba.weight"].T.reshape(d, n, 2 * group)
    conv = t["conv1d.weight"][:, 0, :].T  # [W, channels] over q | k | v
    taps = conv.shape[0]
    q_conv, k_conv, v_conv = np.split(conv, np.cumsum([n * kd, n * kd]), axis=1)
    return {
        "q_proj": {"kernel": q},
        "k_proj": {"kernel": k},
        "v_proj": {"kernel": v.reshape(d, h, vd)},
        "g_proj": {"kernel": z.reshape(d, h, vd)},
        "b_proj": {"kernel": ba[..., :group].reshape(d, h)},
        "a_proj": {"kernel": ba[..., group:].reshape(d, h)},
        "q_conv": {"weight": q_conv.reshape(taps, n, kd)},
        "k_conv": {"weight": k_conv.reshape(taps, n, kd)},
        "v_conv": {"weight": v_conv.reshape(taps, h, vd)},
        "A_log": t["A_log"],
        "dt_bias": t["dt_bias"],
        "o_norm": {"scale": t["norm.weight"]},
        "o_proj": {"kernel": t["out_proj.weight"].T.reshape(h, vd, d)},
    }


def test_mixer_matches_transformers_qwen3_next():
    import torch

    layer = _qwen3_next_layer(SPEC)
    model = gated_delta.GatedDeltaNet(SPEC, rngs=nnx.Rngs(params=0))
    load(model, params_from_qwen3_next(layer, SPEC))
    x = _inputs(1, 70)  # more than one of transformers' 64-token chunks
    with torch.no_grad():
        want = layer(torch.from_numpy(x).float()).numpy()
    got = np.asarray(_run(model, jnp.asarray(x, jnp.float32)))
    assert np.abs(want).max() > 0.1  # the comparison is not between two near-zero outputs
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_decoding_matches_whole_sequence():
    model, _ = _mixer()
    x = jnp.asarray(_inputs(2), jnp.float32)
    want = np.asarray(_run(model, x))
    cache = model.init_cache(x.shape[0])
    outs = []
    y, cache = model.decode(x[:, :9], cache)  # a prompt through the chunked path
    outs.append(y)
    step = jax.jit(lambda m, x, c: m.decode(x, c))
    for t in range(9, x.shape[1]):  # then one token at a time through the recurrent step
        y, cache = step(model, x[:, t : t + 1], cache)
        outs.append(y)
    np.testing.assert_allclose(np.asarray(jnp.concatenate(outs, axis=1)), want, atol=1e-5)


def test_packed_documents_do_not_see_each_other():
    model, _ = _mixer()
    x = jnp.asarray(_inputs(4), jnp.float32)
    segment = jnp.asarray([[0] * 10 + [1] * 11, [3] * LENGTH])
    packed = np.asarray(_run(model, x, segment))
    first, second = np.asarray(_run(model, x[:1, :10])), np.asarray(_run(model, x[:1, 10:]))
    np.testing.assert_allclose(packed[0, :10], first[0], atol=1e-5)
    np.testing.assert_allclose(packed[0, 10:], second[0], atol=1e-5)
    np.testing.assert_allclose(packed[1], np.asarray(_run(model, x[1:]))[0], atol=1e-5)


def test_gradients_are_finite_and_jit_compiles():
    model, _ = _mixer()
    x = jnp.asarray(_inputs(5), jnp.float32)

    @jax.jit
    def loss(m, x):
        return jnp.mean(m(x) ** 2)

    grads = nnx.grad(loss)(model, x)
    leaves = jax.tree.leaves(nnx.state(grads))
    assert all(np.isfinite(np.asarray(g)).all() for g in leaves)
    assert all(np.abs(np.asarray(g)).max() > 0 for g in leaves)


def test_weights_name_their_head_axes_and_counts_match():
    model, _ = _mixer()
    axes = {
        "/".join(str(p) for p in path): v.logical_axes
        for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))
    }
    assert axes["q_proj/kernel"] == ("embed", "heads", "head_dim")
    assert axes["v_proj/kernel"] == ("embed", "heads", "head_dim")
    assert axes["o_proj/kernel"] == ("heads", "head_dim", "embed")
    assert axes["A_log"] == ("heads",) and axes["q_conv/weight"] == (None, "heads", "head_dim")
    count = sum(np.size(v) for v in jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert delta_sizes.gdn_params(SPEC) == count
    layer = _qwen3_next_layer(SPEC)
    assert delta_sizes.gdn_params(SPEC) == sum(p.numel() for p in layer.parameters())
    assert delta_sizes.gdn_flops_per_token(SPEC) > 6 * delta_sizes.gdn_matmul_params(SPEC)


def test_value_heads_must_group_the_key_heads():
    with pytest.raises(ConfigError, match="linear_num_value_heads=3 is not a multiple"):
        dataclasses.replace(SPEC, linear_num_value_heads=3).validate()
