"""Logit parity with transformers (torch, float32) in both directions, for every family.

Hugging Face -> jaxtrain: a tiny random transformers model is saved with `save_pretrained`, read
with `load_hf_params` and run in jaxtrain. jaxtrain -> Hugging Face: a tiny random jaxtrain model
is written with `save_hf_checkpoint` and run with `AutoModelForCausalLM.from_pretrained`. Weights
(norm scales and biases included) are drawn large enough that any mapping slip shows in logits.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch",
    reason="torch (CPU) is the transformers reference; "
    "install the `test` extra to run parity tests.",
)
transformers = pytest.importorskip("transformers")

from parity_helpers import (  # noqa: E402
    assert_logits_match,
    exported_hf_model,
    hf_logits,
    max_diff,
    random_hf_model,
    random_params,
    tokens,
)

from jaxtrain.interop.hf import load_hf_params, model_from_params  # noqa: E402
from jaxtrain.models import ModelSpec  # noqa: E402

VOCAB, SEQ = 160, 20
_TINY = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
)
_LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}

# name -> (config class, kwargs). Rope is given in the transformers-4 form both versions accept.
HF_CASES = {
    "llama2": ("LlamaConfig", dict(_TINY, num_key_value_heads=4, rope_theta=10000.0)),
    "llama3": (
        "LlamaConfig",
        dict(_TINY, num_key_value_heads=2, rope_theta=500000.0, rope_scaling=_LLAMA3_ROPE),
    ),
    "llama3.2-tied": (
        "LlamaConfig",
        dict(
            _TINY,
            num_key_value_heads=2,
            rope_theta=500000.0,
            rope_scaling=_LLAMA3_ROPE,
            tie_word_embeddings=True,
        ),
    ),
    "qwen2.5": (
        "Qwen2Config",
        dict(
            _TINY,
            num_key_value_heads=2,
            rope_theta=1000000.0,
            use_sliding_window=False,
            sliding_window=4096,
        ),
    ),
    "qwen3": ("Qwen3Config", dict(_TINY, num_key_value_heads=2, head_dim=32, rope_theta=1000000.0)),
    "mistral": (
        "MistralConfig",
        dict(_TINY, num_key_value_heads=2, head_dim=16, rope_theta=10000.0, sliding_window=6),
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
# The mapping table is shared by both directions, so this side covers each family once.
SPEC_CASES = {
    "llama3": ModelSpec(
        family="llama",
        rope_theta=500000.0,
        rope_scaling="llama3",
        rope_factor=8.0,
        rope_original_max_len=64,
        **_SPEC,
    ),
    "llama-linear-tied": ModelSpec(
        family="llama", rope_scaling="linear", rope_factor=2.0, tie_embeddings=True, **_SPEC
    ),
    "qwen2.5-window": ModelSpec(family="qwen2", qkv_bias=True, sliding_window=5, **_SPEC),
    "qwen3-tied": ModelSpec(
        family="qwen3", qk_norm=True, tie_embeddings=True, **{**_SPEC, "head_dim": 32}
    ),
    "mistral": ModelSpec(family="mistral", sliding_window=6, **_SPEC),
}


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_to_jaxtrain_logits(case, tmp_path):
    config_cls, kwargs = HF_CASES[case]
    hf_model = random_hf_model(
        getattr(transformers, config_cls)(**kwargs), std=0.15, param_std={".bias": 0.1}
    )
    hf_model.save_pretrained(tmp_path)

    spec, params = load_hf_params(tmp_path)
    tokens_BL = tokens(VOCAB, SEQ)
    ours = model_from_params(spec, params)(tokens_BL)
    ref = hf_logits(hf_model, tokens_BL)
    assert ours.shape == ref.shape == (2, SEQ, VOCAB)
    assert float(np.abs(ref).max()) > 1.0  # logits large enough for the tolerance to bite
    assert max_diff(ours, ref) < 1e-4
    if case == "mistral":
        # The window is shorter than the sequence, so it must matter: without it (Mistral reads
        # the window from its config at call time) the reference logits move away from ours.
        assert spec.sliding_window == 6 < SEQ
        hf_model.config.sliding_window = None
        assert max_diff(ours, hf_logits(hf_model, tokens_BL)) > 1e-2


@pytest.mark.parametrize("case", sorted(SPEC_CASES))
def test_jaxtrain_tohf_logits(case, tmp_path):
    spec = SPEC_CASES[case]
    params = random_params(spec)
    expected_arch = {
        "llama": "LlamaForCausalLM",
        "qwen2": "Qwen2ForCausalLM",
        "qwen3": "Qwen3ForCausalLM",
        "mistral": "MistralForCausalLM",
    }[spec.family]
    hf_model = exported_hf_model(spec, params, tmp_path, expected_arch)
    tokens_BL = tokens(VOCAB, SEQ)
    assert_logits_match(model_from_params(spec, params)(tokens_BL), hf_model, tokens_BL)
