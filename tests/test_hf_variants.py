"""Variants of the Hugging Face families beyond their defaults: Llama (and Qwen 3) attention and
MLP biases, Qwen2 sliding windows on only some layers, Qwen3-MoE with dense and expert layers
mixed. Each has logit parity with transformers (torch, float32, 1e-4) in both directions, the
parameter count of transformers' model, and trains on a sharded mesh as on one device.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import pytest

torch = pytest.importorskip(
    "torch",
    reason="torch (CPU) is the transformers reference; "
    "install the `test` extra to run parity tests.",
)
transformers = pytest.importorskip("transformers")

from flax import nnx  # noqa: E402
from parity_helpers import (  # noqa: E402
    assert_logits_match,
    exported_hf_model,
    random_hf_model,
    random_params,
    tokens,
)
from training_helpers import mesh, train  # noqa: E402

from jaxtrain.errors import ConfigError  # noqa: E402
from jaxtrain.interop.hf import load_hf_params, model_from_params  # noqa: E402
from jaxtrain.interop.hf_config import hf_config_from_spec, spec_from_hf_config  # noqa: E402
from jaxtrain.models import Decoder, ModelSpec  # noqa: E402

VOCAB, SEQ = 128, 20
_TINY = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
)

_MOE = dict(
    _TINY,
    num_hidden_layers=4,
    moe_intermediate_size=32,
    num_experts=4,
    num_experts_per_tok=2,
    norm_topk_prob=True,
)
# name -> (config class, kwargs, the spec fields the file must give)
HF_CASES = {
    "llama-biases": (
        "LlamaConfig",
        dict(_TINY, num_hidden_layers=2, attention_bias=True, mlp_bias=True),
        dict(qkv_bias=True, o_bias=True, mlp_bias=True),
    ),
    "llama-mlp-bias": (
        "LlamaConfig",
        dict(_TINY, num_hidden_layers=2, mlp_bias=True),
        dict(qkv_bias=False, o_bias=False, mlp_bias=True),
    ),
    "qwen3-attention-bias": (
        "Qwen3Config",
        dict(_TINY, num_hidden_layers=2, attention_bias=True),
        dict(qkv_bias=True, o_bias=True, qk_norm=True),
    ),
    # Layers 0 and 1 attend fully, 2 and 3 in a window of 5 (shorter than the sequence).
    "qwen2-window-layers": (
        "Qwen2Config",
        dict(
            _TINY,
            num_hidden_layers=4,
            use_sliding_window=True,
            sliding_window=5,
            max_window_layers=2,
        ),
        dict(sliding_window=5, leading_global_layers=2),
    ),
    "qwen3-window-layer-types": (
        "Qwen3Config",
        dict(
            _TINY,
            num_hidden_layers=3,
            use_sliding_window=True,
            sliding_window=4,
            layer_types=["full_attention", "sliding_attention", "sliding_attention"],
        ),
        dict(sliding_window=4, leading_global_layers=1),
    ),
    # Dense layers (intermediate_size 96) mixed with expert layers (moe_intermediate_size 32).
    "qwen3_moe-sparse-step": (
        "Qwen3MoeConfig",
        dict(_MOE, decoder_sparse_step=2, mlp_only_layers=[]),
        dict(moe_layer_step=2, num_dense_layers=0, num_moe_layers=2),
    ),
    "qwen3_moe-step-and-first-dense": (
        "Qwen3MoeConfig",
        dict(_MOE, decoder_sparse_step=2, mlp_only_layers=[0]),
        dict(moe_layer_step=2, num_dense_layers=0, num_moe_layers=2),
    ),
    "qwen3_moe-first-dense": (
        "Qwen3MoeConfig",
        dict(_MOE, decoder_sparse_step=1, mlp_only_layers=[0]),
        dict(moe_layer_step=1, num_dense_layers=1, num_moe_layers=3),
    ),
}

_SPEC = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    max_seq_len=256,
    norm_eps=1e-6,
    init_std=0.15,
)
_SPEC_MOE = dict(
    _SPEC,
    num_layers=4,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    moe_score="softmax_topk",
)
# name -> (spec, the transformers class it exports as)
SPEC_CASES = {
    "llama-biases": (
        ModelSpec(family="llama", qkv_bias=True, o_bias=True, mlp_bias=True, **_SPEC),
        "LlamaForCausalLM",
    ),
    "qwen3-attention-bias": (
        ModelSpec(family="qwen3", qkv_bias=True, o_bias=True, qk_norm=True, **_SPEC),
        "Qwen3ForCausalLM",
    ),
    "qwen2-window-layers": (
        ModelSpec(
            family="qwen2",
            qkv_bias=True,
            sliding_window=5,
            leading_global_layers=1,
            **{**_SPEC, "num_layers": 3},
        ),
        "Qwen2ForCausalLM",
    ),
    "qwen3_moe-sparse-step": (
        ModelSpec(family="qwen3_moe", qk_norm=True, moe_layer_step=2, **_SPEC_MOE),
        "Qwen3MoeForCausalLM",
    ),
    "qwen3_moe-first-dense": (
        ModelSpec(
            family="qwen3_moe", qk_norm=True, num_dense_layers=1, **{**_SPEC_MOE, "num_layers": 3}
        ),
        "Qwen3MoeForCausalLM",
    ),
}


def _param_count(spec: ModelSpec) -> int:
    """Sizes of every parameter of the jaxtrain model, built without allocating it."""
    model = nnx.eval_shape(lambda: Decoder(spec, rngs=nnx.Rngs(0)))
    return sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_to_jaxtrain_logits_and_counts(case, tmp_path):
    config_cls, kwargs, fields = HF_CASES[case]
    hf_model = random_hf_model(
        getattr(transformers, config_cls)(**kwargs), std=0.15, param_std={".bias": 0.1}
    )
    hf_model.save_pretrained(tmp_path)
    spec, params = load_hf_params(tmp_path)
    assert {k: getattr(spec, k) for k in fields} == fields
    hf_count = sum(p.numel() for p in hf_model.parameters())
    assert spec.num_params() == _param_count(spec) == hf_count
    tokens_BL = tokens(VOCAB, SEQ)
    ours = model_from_params(spec, params)(tokens_BL)
    assert_logits_match(ours, hf_model, tokens_BL, case)
    if spec.leading_global_layers:
        # Both the window and where it starts must matter at this length.
        for change in (
            dict(leading_global_layers=0),
            dict(sliding_window=0, leading_global_layers=0),
        ):
            other = model_from_params(dataclasses.replace(spec, **change), params)(tokens_BL)
            assert float(np.abs(other - ours).max()) > 1e-2, change


@pytest.mark.parametrize("case", sorted(SPEC_CASES))
def test_jaxtrain_to_hf_logits(case, tmp_path):
    spec, arch = SPEC_CASES[case]
    params = random_params(spec)
    hf_model = exported_hf_model(spec, params, tmp_path, arch)
    assert spec_from_hf_config(hf_config_from_spec(spec)) == spec
    tokens_BL = tokens(VOCAB, SEQ)
    assert_logits_match(model_from_params(spec, params)(tokens_BL), hf_model, tokens_BL, case)


def test_sliding_layers_jaxtrain_cannot_express_are_named():
    cfg = dict(
        _TINY,
        architectures=["Qwen2ForCausalLM"],
        model_type="qwen2",
        num_hidden_layers=3,
        use_sliding_window=True,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    )
    with pytest.raises(ConfigError, match=r"layer_types=\['sliding_attention', 'full_attention'"):
        spec_from_hf_config(cfg)
    # A window on no layer, or use_sliding_window off, is full attention everywhere.
    for change in (dict(max_window_layers=3, layer_types=None), dict(use_sliding_window=False)):
        spec = spec_from_hf_config({**cfg, **change})
        assert (spec.sliding_window, spec.leading_global_layers) == (0, 0)


@pytest.mark.parametrize("case", ["qwen2-window-layers", "llama-biases"])
def test_cached_decoding_matches_the_full_forward(case):
    spec = SPEC_CASES[case][0]
    model = model_from_params(spec, random_params(spec))
    tokens_BL = tokens(VOCAB, SEQ)
    full_BLV = model(tokens_BL)
    cache = model.init_cache(2, 32)
    h_BLD, cache = model.hidden_states(tokens_BL[:, :7], cache=cache, cache_index=0)
    outs = [model.logits(h_BLD)]
    for i in range(7, SEQ):
        h_BLD, cache = model.hidden_states(tokens_BL[:, i : i + 1], cache=cache, cache_index=i)
        outs.append(model.logits(h_BLD))
    np.testing.assert_allclose(np.concatenate(outs, 1), full_BLV, atol=1e-4)


def test_flops_count_the_window_on_sliding_layers_only():
    spec = SPEC_CASES["qwen2-window-layers"][0]  # 3 layers, the last two in a window of 5
    full = dataclasses.replace(spec, sliding_window=0, leading_global_layers=0)
    t, n, h = 64, spec.num_heads, spec.head_dim
    per_context = 3 * 2 * n * (2 * h) / 2  # FLOPs per token per attended position per layer
    assert full.flops_per_token(t) - spec.flops_per_token(t) == 2 * (t - 5) * per_context


@pytest.mark.parametrize("only, step", [([0, 3], 2), ([1], 1), ([], 3), ([0, 1, 2, 3], 1)])
def test_expert_layers_jaxtrain_cannot_express_are_named(only, step):
    cfg = dict(
        _MOE,
        architectures=["Qwen3MoeForCausalLM"],
        model_type="qwen3_moe",
        decoder_sparse_step=step,
        mlp_only_layers=only,
    )
    with pytest.raises(
        ConfigError,
        match=rf"decoder_sparse_step={step}, mlp_only_layers="
        rf"\[{', '.join(map(str, only))}\] put experts in",
    ):
        spec_from_hf_config(cfg)


@pytest.mark.parametrize(
    "case",
    ["llama-biases", "qwen2-window-layers", "qwen3_moe-sparse-step", "qwen3_moe-first-dense"],
)
def test_variant_trains_sharded_as_on_one_device(case):
    spec = SPEC_CASES[case][0]
    reference, _, _, _, _ = train(spec, mesh(), steps=3)
    parallel = (
        dict(ici_expert=2, ici_fsdp=2) if spec.num_experts else dict(ici_fsdp=2, ici_tensor=2)
    )
    sharded, _, _, shardings, _ = train(spec, mesh(**parallel), steps=3)
    assert reference[-1] < reference[0]
    np.testing.assert_allclose(sharded, reference, rtol=2e-5)
    if spec.mlp_bias:  # the new biases are sharded like their projections' outputs
        mlp = shardings["layers"]["mlp"]
        assert mlp["up_proj"]["bias"].spec[-1] == mlp["up_proj"]["kernel"].spec[-1]
