"""Kimi delta attention: the mixer against a NumPy layer written from the Kimi Linear report's
definition (FLA / Zebra-Llama layout: key and value widths apart, grouped value heads, gate
bias) and against transformers' KimiLinear layer, and decoding against the whole-sequence
pass. The chunked kernel's per-channel decays are checked in tests/test_gated_delta.py."""

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
    softplus,
)
from flax import nnx

from jaxtrain.models.mixers import kda
from jaxtrain.models.spec import delta_sizes
from jaxtrain.models.spec.hyperparameters import ModelSpec

# Zebra-Llama's shape in small: keys narrower than values (K = 16, V = 32 there 32 / 64).
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
    linear_num_value_heads=2,
    linear_key_head_dim=8,
    linear_value_head_dim=16,
    linear_chunk=8,
    linear_gate_bias=True,
)
LENGTH = 21


@nnx.jit
def _run(model, x, segment=None):
    return model(x, segment)


def _inputs(seed: int = 0, length: int = LENGTH) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 1.0, (2, length, SPEC.hidden_size))


def _mixer(spec: ModelSpec = SPEC, seed: int = 0) -> tuple[kda.KimiDeltaAttention, dict]:
    model = kda.KimiDeltaAttention(spec, rngs=nnx.Rngs(params=seed))
    return model, randomize(model, seed)


def naive_kda(p: dict, x: np.ndarray, spec: ModelSpec) -> np.ndarray:
    """Kimi delta attention from the definition, FLA's layout."""
    n, h = spec.linear_num_key_heads, spec.linear_num_value_heads
    kd = spec.linear_key_head_dim

    def proj(name, y=x):
        out = np.einsum("bld,d...->bl...", y, p[name]["kernel"])
        return out + p[name]["bias"] if "bias" in p[name] else out

    def conv(name, y):
        w = p[name]["weight"]
        return causal_conv(y.reshape(*y.shape[:2], -1), w.reshape(w.shape[0], -1)).reshape(y.shape)

    q = l2norm(conv("q_conv", proj("q_proj"))) * kd**-0.5
    k = l2norm(conv("k_conv", proj("k_proj")))
    v = conv("v_conv", proj("v_proj"))
    q, k = (np.repeat(t, h // n, axis=2) for t in (q, k))
    beta = sigmoid(proj("b_proj"))
    g = -np.exp(p["A_log"])[:, None] * softplus(proj("f_b_proj", proj("f_a_proj")) + p["dt_bias"])
    o, _ = naive_delta_rule(q, k, v, g, beta)
    o = rmsnorm(o, p["o_norm"]["scale"], spec.norm_eps)
    o = o * sigmoid(proj("g_b_proj", proj("g_a_proj")))
    return np.einsum("blhv,hvd->bld", o, p["o_proj"]["kernel"])


@pytest.mark.parametrize(
    "variant", [{}, {"linear_gate_bias": False}, {"linear_num_value_heads": 4, "linear_chunk": 4}]
)
def test_mixer_matches_definition(variant):
    spec = dataclasses.replace(SPEC, **variant)
    model, params = _mixer(spec)
    assert (model.g_b_proj.bias is not None) == spec.linear_gate_bias
    x = _inputs()
    got = _run(model, jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(np.asarray(got), naive_kda(params, x, spec), atol=1e-4)


def _kimi_layer(spec: ModelSpec):
    """transformers' KimiLinear KDA layer of `spec`'s sizes, weights at a scale that matters."""
    torch = pytest.importorskip("torch")
    from transformers import KimiLinearConfig
    from transformers.models.kimi_linear import modeling_kimi_linear as kl

    config = KimiLinearConfig(
        hidden_size=spec.hidden_size,
        linear_head_dim=spec.linear_key_head_dim,
        linear_num_heads=spec.linear_num_key_heads,
        linear_conv_kernel_dim=spec.linear_conv_kernel,
        rms_norm_eps=spec.norm_eps,
        num_hidden_layers=1,
        layer_types=["linear_attention"],
    )
    torch.manual_seed(0)
    layer = kl.KimiLinearDeltaAttention(config, layer_idx=0).float().eval()
    with torch.no_grad():
        for name, param in layer.named_parameters():
            if name == "o_norm.weight":
                param.uniform_(0.5, 1.5)
            elif name == "conv1d.weight":
                param.normal_(0.0, 0.4)
            elif name == "forget_gate.A_log":
                param.copy_(torch.empty_like(param).uniform_(1.0, 16.0).log())
            elif name == "forget_gate.dt_bias":
                param.normal_(0.0, 1.0)
            else:
                param.normal_(0.0, 0.2)
    return layer


def params_from_kimi(layer, spec: ModelSpec) -> dict:
    """KimiLinear's weights in the mixer's layout (its one conv split into q, k, v)."""
    n, kd, d = spec.linear_num_key_heads, spec.linear_key_head_dim, spec.hidden_size
    t = {name: p.detach().numpy().astype(np.float64) for name, p in layer.named_parameters()}

    def linear(name, *out):
        return t[f"{name}.weight"].T.reshape(-1, *out)

    conv = t["conv1d.weight"][:, 0, :].T.reshape(-1, 3, n, kd)
    return {
        "q_proj": {"kernel": linear("q_proj", n, kd)},
        "k_proj": {"kernel": linear("k_proj", n, kd)},
        "v_proj": {"kernel": linear("v_proj", n, kd)},
        "q_conv": {"weight": conv[:, 0]},
        "k_conv": {"weight": conv[:, 1]},
        "v_conv": {"weight": conv[:, 2]},
        "f_a_proj": {"kernel": linear("forget_gate.f_a_proj", kd).reshape(d, kd)},
        "f_b_proj": {"kernel": linear("forget_gate.f_b_proj", n, kd)},
        "b_proj": {"kernel": linear("b_proj", n)},
        "A_log": t["forget_gate.A_log"].reshape(n),
        "dt_bias": t["forget_gate.dt_bias"].reshape(n, kd),
        "g_a_proj": {"kernel": linear("g_a_proj", kd).reshape(d, kd)},
        "g_b_proj": {"kernel": linear("g_b_proj", n, kd)},
        "o_norm": {"scale": t["o_norm.weight"]},
        "o_proj": {"kernel": t["o_proj.weight"].T.reshape(n, kd, d)},
    }


KIMI_SPEC = dataclasses.replace(
    SPEC, linear_value_head_dim=SPEC.linear_key_head_dim, linear_gate_bias=False
)


def test_mixer_matches_transformers_kimi_linear():
    import torch

    layer = _kimi_layer(KIMI_SPEC)
    model = kda.KimiDeltaAttention(KIMI_SPEC, rngs=nnx.Rngs(params=0))
    load(model, params_from_kimi(layer, KIMI_SPEC))
    x = _inputs(1, 70)  # more than one of transformers' 64-token chunks
    with torch.no_grad():
        want = layer(torch.from_numpy(x).float()).numpy()
    got = np.asarray(_run(model, jnp.asarray(x, jnp.float32)))
    assert np.abs(want).max() > 0.1
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert delta_sizes.kda_params(KIMI_SPEC) == sum(p.numel() for p in layer.parameters())


def test_decoding_matches_whole_sequence():
    model, _ = _mixer()
    x = jnp.asarray(_inputs(2), jnp.float32)
    want = np.asarray(_run(model, x))
    cache = model.init_cache(x.shape[0])
    y, cache = model.decode(x[:, :9], cache)
    outs = [y]
    step = jax.jit(lambda m, x, c: m.decode(x, c))
    for t in range(9, x.shape[1]):
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


def test_parameter_count_and_head_axes():
    model, _ = _mixer()
    flat = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    assert flat[("dt_bias",)].logical_axes == ("heads", "head_dim")
    assert flat[("f_b_proj", "kernel")].logical_axes == ("latent", "heads", "head_dim")
    count = sum(np.size(v) for v in jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert delta_sizes.kda_params(SPEC) == count
    assert delta_sizes.kda_flops_per_token(SPEC) > 6 * delta_sizes.kda_matmul_params(SPEC)


def test_gradients_are_finite():
    model, _ = _mixer()
    x = jnp.asarray(_inputs(5), jnp.float32)
    grads = nnx.grad(nnx.jit(lambda m, x: jnp.mean(m(x) ** 2)))(model, x)
    leaves = jax.tree.leaves(nnx.state(grads))
    assert all(np.isfinite(np.asarray(g)).all() and np.abs(np.asarray(g)).max() > 0 for g in leaves)
