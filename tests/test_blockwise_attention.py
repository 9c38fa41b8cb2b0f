"""The blockwise attention kernel and the hand-written projection gradient equal what autodiff
gives for the plain formulas, so choosing an implementation never changes training."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxtrain.models.assembly.decoder import build_model
from jaxtrain.models.layers.basic import project
from jaxtrain.models.mixers import blockwise_attention
from jaxtrain.models.mixers.attention import (
    attention_mask,
    fused_attention,
    masked_softmax_attention,
)
from jaxtrain.models.mixers.blockwise_attention import (
    blockwise_causal_attention,
    keeps_probabilities,
)
from jaxtrain.models.presets.registry import model_config
from jaxtrain.models.spec.hyperparameters import ModelSpec

# The backward pass either reads the softmax numerators the forward pass kept or recomputes
# them; every gradient check runs both ways.
both_backward_paths = pytest.mark.parametrize(
    "kept_bytes", [64 << 20, 0], ids=["kept", "recomputed"]
)


def _numpy_attention(q, k, v, segment, window, scale, chunk=0, sinks=None):
    """The definition, one query at a time; a sink is one more exponent in the denominator."""
    b, l, n, _ = q.shape
    group = n // k.shape[2]
    out = np.zeros((b, l, n, v.shape[-1]))
    for bi in range(b):
        for i in range(l):
            keys = [
                j
                for j in range(i + 1)
                if (not window or i - j < window)
                and (not chunk or i // chunk == j // chunk)
                and (segment is None or segment[bi, i] == segment[bi, j])
            ]
            for h in range(n):
                s = np.array([q[bi, i, h] @ k[bi, j, h // group] for j in keys]) * scale
                p = np.exp(s - s.max())
                p /= p.sum() + (0.0 if sinks is None else np.exp(sinks[h] - s.max()))
                out[bi, i, h] = sum(pj * v[bi, j, h // group] for pj, j in zip(p, keys))
    return out


def _dot(q, k, v, segment, window, scale, chunk=0, sinks=None):
    index = jnp.broadcast_to(jnp.arange(q.shape[1]), q.shape[:2])
    mask = attention_mask(
        index, index, window=window, chunk=chunk, q_segment_BL=segment, kv_segment_BS=segment
    )
    return masked_softmax_attention(q, k, v, mask, scale, sinks)


def _inputs(length, value_dim, seed=0, dtype=jnp.float32):
    keys = jax.random.split(jax.random.PRNGKey(seed), 5)
    q = jax.random.normal(keys[0], (2, length, 4, 8), dtype)
    k = jax.random.normal(keys[1], (2, length, 2, 8), dtype)
    v = jax.random.normal(keys[2], (2, length, 2, value_dim), dtype)
    # Documents start where a coin lands heads: several per row, of uneven lengths.
    segment = jnp.cumsum(jax.random.uniform(keys[3], (2, length)) < 0.15, axis=1)
    cotangent = jax.random.normal(keys[4], (2, length, 4, value_dim), jnp.float32)
    return q, k, v, segment.astype(jnp.int32), cotangent


def test_masked_softmax_path_is_the_definition():
    q, k, v, segment, _ = _inputs(12, 8)
    got = _dot(q, k, v, segment, 5, 0.3)
    want = _numpy_attention(
        *(np.asarray(x, np.float64) for x in (q, k, v)), np.asarray(segment), 5, 0.3
    )
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)


@pytest.mark.parametrize(
    "length,block,window,documents,value_dim",
    [
        (64, 16, 0, False, 8),  # several blocks, full causal
        (50, 16, 0, True, 12),  # a ragged last block, documents, value width != key width
        (64, 16, 10, True, 8),  # sliding window: blocks skip keys left of the window
        (64, 128, 7, False, 8),  # one block larger than the sequence
    ],
)
@both_backward_paths
def test_blockwise_equals_masked_softmax_values_and_gradients(
    length, block, window, documents, value_dim, kept_bytes, monkeypatch
):
    monkeypatch.setattr(blockwise_attention, "KEPT_PROBABILITIES_BYTES", kept_bytes)
    q, k, v, segment, cotangent = _inputs(length, value_dim)
    segment = segment if documents else None

    def loss(fn):
        return lambda q, k, v: jnp.sum(fn(q, k, v) * cotangent)

    blockwise = lambda q, k, v: blockwise_causal_attention(q, k, v, segment, window, 0.3, block)
    reference = lambda q, k, v: _dot(q, k, v, segment, window, 0.3)
    np.testing.assert_allclose(blockwise(q, k, v), reference(q, k, v), atol=2e-6)
    got = jax.grad(loss(blockwise), argnums=(0, 1, 2))(q, k, v)
    want = jax.grad(loss(reference), argnums=(0, 1, 2))(q, k, v)
    for name, g, w in zip("qkv", got, want):
        np.testing.assert_allclose(g, w, atol=5e-6, err_msg=f"d{name}")


_SINKS = jnp.asarray([0.5, -1.0, 2.0, 0.0])


@pytest.mark.parametrize("window,chunk,sinks", [(0, 5, False), (6, 0, True), (0, 7, True)])
def test_masked_softmax_path_is_the_definition_with_chunks_and_sinks(window, chunk, sinks):
    q, k, v, segment, _ = _inputs(20, 8)
    sinks_N = _SINKS if sinks else None
    got = _dot(q, k, v, segment, window, 0.3, chunk, sinks_N)
    want = _numpy_attention(
        *(np.asarray(x, np.float64) for x in (q, k, v)),
        np.asarray(segment),
        window,
        0.3,
        chunk,
        None if sinks_N is None else np.asarray(sinks_N, np.float64),
    )
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)


@pytest.mark.parametrize(
    "length,block,window,chunk,documents",
    [
        (64, 16, 0, 24, False),  # chunks straddling query blocks: first keys at chunk starts
        (50, 16, 0, 16, True),  # chunks aligned with blocks, documents, a ragged last block
        (64, 16, 10, 0, True),  # sinks with a sliding window
        (40, 128, 0, 0, False),  # sinks alone, one block
    ],
)
@both_backward_paths
def test_blockwise_with_chunks_and_sinks_equals_masked_softmax(
    length, block, window, chunk, documents, kept_bytes, monkeypatch
):
    monkeypatch.setattr(blockwise_attention, "KEPT_PROBABILITIES_BYTES", kept_bytes)
    q, k, v, segment, cotangent = _inputs(length, 8)
    segment = segment if documents else None

    def loss(fn):
        return lambda q, k, v, sinks: jnp.sum(fn(q, k, v, sinks) * cotangent)

    def blockwise(q, k, v, sinks):
        return blockwise_causal_attention(
            q, k, v, segment, window, 0.3, block, chunk=chunk, sinks_N=sinks
        )

    reference = lambda q, k, v, sinks: _dot(q, k, v, segment, window, 0.3, chunk, sinks)
    np.testing.assert_allclose(blockwise(q, k, v, _SINKS), reference(q, k, v, _SINKS), atol=2e-6)
    got = jax.grad(loss(blockwise), argnums=(0, 1, 2, 3))(q, k, v, _SINKS)
    want = jax.grad(loss(reference), argnums=(0, 1, 2, 3))(q, k, v, _SINKS)
    for name, g, w in zip(("q", "k", "v", "sinks"), got, want):
        np.testing.assert_allclose(g, w, atol=5e-6, err_msg=f"d{name}")
    if chunk:  # without sinks too
        np.testing.assert_allclose(blockwise(q, k, v, None), reference(q, k, v, None), atol=2e-6)


def test_cudnn_is_never_chosen_for_sinks_or_chunks_and_refuses_them_when_asked():
    from jaxtrain.models.mixers.attention import _use_cudnn
    from jaxtrain.models.spec.layer_pattern import AttentionKind

    q, _, v, _, _ = _inputs(8, 8)
    auto = ModelSpec(dtype="bfloat16")
    assert not _use_cudnn(auto, q, v, None, AttentionKind(chunk=4))
    assert not _use_cudnn(auto, q, v, None, AttentionKind(), sinks=True)
    cudnn = ModelSpec(attention_impl="cudnn")
    with pytest.raises(ValueError, match="cannot express model.attention_sinks"):
        _use_cudnn(cudnn, q, v, None, AttentionKind(), sinks=True)
    with pytest.raises(ValueError, match="cannot express model.attention_chunk=4"):
        _use_cudnn(cudnn, q, v, None, AttentionKind(chunk=4))


def test_blockwise_in_bfloat16_stays_close_to_float32():
    q, k, v, segment, _ = _inputs(64, 8)
    out16 = blockwise_causal_attention(
        *(x.astype(jnp.bfloat16) for x in (q, k, v)), segment, 0, 0.3, 16
    )
    assert out16.dtype == jnp.bfloat16
    np.testing.assert_allclose(out16.astype(jnp.float32), _dot(q, k, v, segment, 0, 0.3), atol=5e-2)


def test_fused_attention_arguments_mean_what_the_other_paths_mean():
    # jax's XLA implementation takes the same arguments as the cuDNN one the GPU path uses.
    q, k, v, _, _ = _inputs(40, 8)
    for window in (0, 9):
        np.testing.assert_allclose(
            fused_attention(q, k, v, 0.3, window, "xla"),
            _dot(q, k, v, None, window, 0.3),
            atol=2e-6,
        )


def test_project_gradient_equals_autodiff():
    keys = jax.random.split(jax.random.PRNGKey(1), 3)
    x = jax.random.normal(keys[0], (2, 5, 3, 4))
    kernel = jax.random.normal(keys[1], (3, 4, 6, 2))
    cotangent = jax.random.normal(keys[2], (2, 5, 6, 2))

    def plain(x, kernel):
        return jnp.einsum("blij,ijoh->bloh", x, kernel)

    for fn in (plain, lambda x, kernel: project(x, kernel, 2)):
        np.testing.assert_allclose(fn(x, kernel), plain(x, kernel), atol=1e-5)
    got = jax.grad(lambda x, w: jnp.sum(project(x, w, 2) * cotangent), (0, 1))(x, kernel)
    want = jax.grad(lambda x, w: jnp.sum(plain(x, w) * cotangent), (0, 1))(x, kernel)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-5)


@pytest.mark.parametrize(
    "preset", ["llama-debug", "mistral-debug", "deepseek-v3-debug", "gpt-oss-debug", "llama4-debug"]
)
def test_model_gradients_do_not_depend_on_the_attention_implementation(preset):
    tokens = jax.random.randint(jax.random.PRNGKey(2), (2, 48), 0, 512)
    segments = jnp.repeat(jnp.arange(3), 16)[None].repeat(2, 0)

    def grads(impl):
        cfg = model_config(preset, attention_impl=impl, attention_block=16, max_seq_len=64)
        model = build_model(ModelSpec.from_config(cfg), seed=0)
        graphdef, params = nnx.split(model)

        def loss(params):
            logits = nnx.merge(graphdef, params)(tokens, segment_ids_BL=segments)
            return jnp.mean(jax.nn.log_softmax(logits)[..., 0])

        return jax.grad(loss)(params)

    blockwise, dot = grads("blockwise"), grads("dot")
    for (path, g), w in zip(
        jax.tree_util.tree_leaves_with_path(blockwise), jax.tree_util.tree_leaves(dot)
    ):
        np.testing.assert_allclose(g, w, atol=2e-6, rtol=1e-4, err_msg=jax.tree_util.keystr(path))


def test_unknown_attention_implementation_is_named():
    from jaxtrain.errors import ConfigError

    with pytest.raises(ConfigError, match="model.attention_impl='flash'"):
        ModelSpec.from_config(model_config("llama-debug", attention_impl="flash"))


def test_attention_block_is_chosen_by_device_and_length_unless_set():
    from jaxtrain.errors import ConfigError
    from jaxtrain.models.mixers.attention import attention_block_size

    auto = ModelSpec.from_config(model_config("llama-debug"))
    assert auto.attention_block == 0
    # These tests run on CPU, where short sequences take smaller blocks.
    assert [attention_block_size(auto, n) for n in (256, 1024, 2048)] == [64, 64, 128]
    fixed = ModelSpec.from_config(model_config("llama-debug", attention_block=32))
    assert attention_block_size(fixed, 4096) == 32
    with pytest.raises(ConfigError, match="model.attention_block=-1"):
        ModelSpec.from_config(model_config("llama-debug", attention_block=-1))


def test_probabilities_are_kept_on_cpus_only_while_they_fit(monkeypatch):
    # 2 x 64 tokens, 4 heads, blocks of 16: 16 x (16 + 32 + 48 + 64) visible entries per head.
    needed = 2 * 4 * 16 * (16 + 32 + 48 + 64) * 4
    monkeypatch.setattr(blockwise_attention, "KEPT_PROBABILITIES_BYTES", needed)
    assert keeps_probabilities((2, 64, 4, 8), 16, 0, 0)
    monkeypatch.setattr(blockwise_attention, "KEPT_PROBABILITIES_BYTES", needed - 1)
    assert not keeps_probabilities((2, 64, 4, 8), 16, 0, 0)
    # A sliding window leaves fewer visible keys per block, so less to keep.
    assert keeps_probabilities((2, 64, 4, 8), 16, 8, 0)
