"""The decoder: shapes, cached decoding, masking, scan vs unrolled layers, remat, dtypes."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxtrain.models import ConfigError, ModelSpec, build_model
from jaxtrain.models.feedforward.mlp import swiglu
from jaxtrain.models.layers.rope import inverse_frequencies, rope_angles, rope_angles_for_length
from jaxtrain.models.mixers.attention import attention_mask

TINY = ModelSpec(
    vocab_size=97,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    max_seq_len=64,
)


def tokens(batch=2, length=12, seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(0, TINY.vocab_size, (batch, length)))


def test_logits_shape_and_param_count():
    model = build_model(TINY)
    assert model(tokens()).shape == (2, 12, TINY.vocab_size)
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    assert sum(x.size for x in jax.tree.leaves(params)) == TINY.num_params()
    # Layer parameters are stacked: one leading dimension per layer.
    assert params["layers"]["attn"]["q_proj"]["kernel"].shape == (2, 32, 4, 8)


@pytest.mark.parametrize(
    "variant",
    [dict(), dict(qk_norm=True, qkv_bias=True), dict(sliding_window=4), dict(tie_embeddings=True)],
)
def test_cached_decoding_matches_full_forward(variant):
    spec = dataclasses.replace(TINY, **variant)
    model = build_model(spec, seed=1)
    toks = tokens(length=10)
    full = model(toks)
    cache = model.init_cache(2, 16)
    # A 4-token prefill, then one token at a time.
    h, cache = model.hidden_states(toks[:, :4], cache=cache, cache_index=0)
    pieces = [model.logits(h)]
    for i in range(4, 10):
        h, cache = model.hidden_states(toks[:, i : i + 1], cache=cache, cache_index=i)
        pieces.append(model.logits(h))
    np.testing.assert_allclose(jnp.concatenate(pieces, axis=1), full, atol=2e-5)


def test_future_tokens_do_not_change_past_logits():
    model = build_model(TINY)
    a, b = tokens(seed=0), tokens(seed=0).at[:, 8:].set(5)
    np.testing.assert_allclose(model(a)[:, :8], model(b)[:, :8], atol=1e-6)
    assert not np.allclose(model(a)[:, 8:], model(b)[:, 8:])


def test_segment_ids_isolate_documents():
    model = build_model(TINY)
    toks = tokens(batch=1, length=12)
    seg = jnp.asarray([[0] * 5 + [1] * 7])
    pos = jnp.asarray([list(range(5)) + list(range(7))])
    packed = model(toks, pos, seg)
    alone = model(toks[:, 5:])
    np.testing.assert_allclose(packed[:, 5:], alone, atol=2e-5)


def test_attention_mask_window_and_causality():
    idx = jnp.arange(6)[None]
    mask = attention_mask(idx, idx, window=3)[0]
    expected = np.array([[j <= i and i - j < 3 for j in range(6)] for i in range(6)])
    np.testing.assert_array_equal(mask, expected)


def test_scan_unrolled_and_remat_agree():
    toks = tokens()
    reference = build_model(TINY)(toks)
    for variant in (dict(scan_layers=False), dict(remat="full"), dict(remat="dots")):
        spec = dataclasses.replace(TINY, **variant)
        model = build_model(spec)

        def loss(m):
            return jnp.mean(m(toks) ** 2)

        np.testing.assert_allclose(model(toks), reference, atol=1e-5)
        grads = nnx.grad(loss)(model)
        assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))


def test_bf16_compute_with_fp32_params():
    spec = dataclasses.replace(TINY, dtype="bfloat16", param_dtype="float32")
    model = build_model(spec)
    logits = model(tokens())
    # Activations are bfloat16; the output projection accumulates into float32 logits.
    assert logits.dtype == jnp.float32
    assert model.hidden_states(tokens())[0].dtype == jnp.bfloat16
    assert model.layers.mlp.up_proj.kernel[...].dtype == jnp.float32
    reference = build_model(TINY)(tokens())
    assert float(jnp.max(jnp.abs(logits.astype(jnp.float32) - reference))) < 0.1


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_swiglu_gradient_matches_autodiff(dtype):
    rng = np.random.default_rng(0)
    gate, up, dh = (jnp.asarray(rng.normal(0, 3, (6, 40)), dtype) for _ in range(3))

    def reference(g, u):
        return jax.nn.silu(g) * u

    np.testing.assert_array_equal(
        np.asarray(swiglu(gate, up), np.float32), np.asarray(reference(gate, up), np.float32)
    )
    ours = jax.vjp(swiglu, gate, up)[1](dh)
    theirs = jax.vjp(reference, gate, up)[1](dh)
    tolerance = 1e-5 if dtype == jnp.float32 else 3e-2
    for a, b in zip(ours, theirs):
        assert a.dtype == dtype
        np.testing.assert_allclose(
            np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=tolerance, atol=tolerance
        )


def test_llama3_rope_scaling_keeps_high_frequencies():
    base = dataclasses.replace(TINY, head_dim=64, rope_theta=500000.0)
    scaled = dataclasses.replace(
        base, rope_scaling="llama3", rope_factor=8.0, rope_original_max_len=8192
    )
    f0, f1 = inverse_frequencies(base), inverse_frequencies(scaled)
    assert f1[0] == pytest.approx(f0[0])  # shortest wavelength untouched
    assert f1[-1] == pytest.approx(f0[-1] / 8.0)  # longest wavelength slowed by the factor


@pytest.mark.parametrize(
    "scaling",
    [
        dict(),
        dict(rope_scaling="llama3", rope_factor=8.0, rope_original_max_len=16),
        dict(rope_scaling="yarn", rope_factor=4.0, rope_original_max_len=16),  # cos/sin scaled
    ],
)
def test_host_rope_tables_match_the_traced_ones(scaling):
    spec = dataclasses.replace(TINY, rope_theta=10000.0, **scaling)
    length = 300
    cos, sin = rope_angles_for_length(spec, length)
    ref_cos, ref_sin = rope_angles(spec, jnp.arange(length)[None])
    assert cos.shape == sin.shape == (1, length, spec.head_dim)
    np.testing.assert_allclose(cos, ref_cos, atol=2e-6)
    np.testing.assert_allclose(sin, ref_sin, atol=2e-6)


def test_default_positions_match_explicit_ones():
    # Training without positions takes the host tables; explicit positions the traced path.
    model = build_model(TINY)
    toks = tokens(length=20)
    explicit = model(toks, jnp.broadcast_to(jnp.arange(20), toks.shape))
    np.testing.assert_allclose(model(toks), explicit, atol=2e-5)


@pytest.mark.parametrize(
    "change, key",
    [
        (dict(num_kv_heads=3), "num_kv_heads"),
        (dict(head_dim=7), "head_dim"),
        (dict(dtype="float64"), "dtype"),
        (dict(remat="sometimes"), "remat"),
        (dict(hidden_size=0), "hidden_size"),
    ],
)
def test_invalid_spec_names_the_key(change, key):
    with pytest.raises(ConfigError, match=f"model.{key}"):
        dataclasses.replace(TINY, **change).validate()
