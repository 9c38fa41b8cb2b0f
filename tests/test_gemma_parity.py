"""Gemma 1, 2 and 3 (text): logit parity with transformers' Gemma, Gemma2 and Gemma3ForCausalLM
(torch, float32) both ways, and the presets' counts against transformers'.

Hugging Face -> jaxtrain: a tiny random transformers model saved with `save_pretrained`, read
with `load_hf_params`. jaxtrain -> Hugging Face: the two-layer debug preset (one sliding, one
global block) with random weights, written with `save_hf_checkpoint` and loaded by
`AutoModelForCausalLM`. The windows are shorter than the sequence and the soft-caps small
enough to bend the scores, so each feature shows in the logits.
"""

from __future__ import annotations

import dataclasses

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
from jaxtrain.models.presets.registry import PUBLISHED_PARAMS, model_spec  # noqa: E402

VOCAB, SEQ = 160, 20
_TINY = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
)
HF_CASES = {
    "gemma": ("GemmaConfig", dict(_TINY, num_key_value_heads=1, hidden_act="gelu_pytorch_tanh")),
    "gemma2": (
        "Gemma2Config",
        dict(
            _TINY,
            sliding_window=6,
            query_pre_attn_scalar=24,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=5.0,
        ),
    ),
    # Layer 0 slides with the local base, layer 1 is global with linear scaling.
    "gemma3": (
        "Gemma3TextConfig",
        dict(
            _TINY,
            sliding_window=6,
            sliding_window_pattern=2,
            query_pre_attn_scalar=24,
            rope_theta=1_000_000.0,
            rope_local_base_freq=100.0,
            rope_scaling={"rope_type": "linear", "factor": 4.0},
        ),
    ),
}
ARCHITECTURE = {
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
}


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_gemma_to_jaxtrain_logits(case, tmp_path):
    config_cls, kwargs = HF_CASES[case]
    hf_model = random_hf_model(getattr(transformers, config_cls)(**kwargs), std=0.15)
    hf_model.save_pretrained(tmp_path)
    spec, params = load_hf_params(tmp_path)
    assert spec.family == case and spec.norm_zero_centered and spec.mlp_activation == "geglu"
    tokens_BL = tokens(VOCAB, SEQ)
    ours = model_from_params(spec, params)(tokens_BL)
    assert ours.shape == (2, SEQ, VOCAB)
    assert_logits_match(ours, hf_model, tokens_BL, case)
    if case == "gemma3":
        # Both rotary bases matter: with the global one on every block the logits move away.
        assert (spec.rope_theta, spec.rope_local_theta, spec.rope_factor) == (1e6, 100.0, 4.0)
        one_base = dataclasses.replace(spec, rope_local_theta=spec.rope_theta)
        ref = hf_logits(hf_model, tokens_BL)
        assert max_diff(model_from_params(one_base, params)(tokens_BL), ref) > 1e-3


@pytest.mark.parametrize("preset", ["gemma-debug", "gemma2-debug", "gemma3-debug"])
def test_jaxtrain_gemma_to_hf_logits(preset, tmp_path):
    spec = model_spec(preset, vocab_size=VOCAB)
    params = random_params(spec)
    hf_model = exported_hf_model(spec, params, tmp_path, ARCHITECTURE[spec.family])
    tokens_BL = tokens(VOCAB, SEQ)
    assert_logits_match(model_from_params(spec, params)(tokens_BL), hf_model, tokens_BL, preset)


@pytest.mark.parametrize(
    "preset, config_cls",
    [
        ("gemma-2b", "GemmaConfig"),
        ("gemma2-27b", "Gemma2Config"),
        ("gemma3-1b", "Gemma3TextConfig"),
        ("gemma3-27b", "Gemma3TextConfig"),
    ],
)
def test_gemma_presets_count_like_transformers(preset, config_cls):
    # The published config.json sizes, written out apart from the presets.
    sizes = {
        "gemma-2b": dict(
            vocab_size=256000,
            hidden_size=2048,
            intermediate_size=16384,
            num_hidden_layers=18,
            num_attention_heads=8,
            num_key_value_heads=1,
            head_dim=256,
        ),
        "gemma2-27b": dict(
            vocab_size=256000,
            hidden_size=4608,
            intermediate_size=36864,
            num_hidden_layers=46,
            num_attention_heads=32,
            num_key_value_heads=16,
            head_dim=128,
        ),
        "gemma3-1b": dict(
            vocab_size=262144,
            hidden_size=1152,
            intermediate_size=6912,
            num_hidden_layers=26,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=256,
        ),
        "gemma3-27b": dict(
            vocab_size=262208,
            hidden_size=5376,
            intermediate_size=21504,
            num_hidden_layers=62,
            num_attention_heads=32,
            num_key_value_heads=16,
            head_dim=128,
        ),
    }[preset]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            getattr(transformers, config_cls)(**sizes)
        )
    count = sum(p.numel() for p in model.parameters())
    assert count == PUBLISHED_PARAMS[preset] == model_spec(preset).num_params()


def test_a_transformers4_gemma3_config_reads_as_the_preset(monkeypatch):
    # google/gemma-3-4b-pt's text_config as transformers 4 writes it: the global base and
    # scaling at top level, the local base in rope_local_base_freq.
    from jaxtrain.interop import hf_config

    published = dict(
        architectures=["Gemma3ForCausalLM"],
        model_type="gemma3_text",
        vocab_size=262208,
        hidden_size=2560,
        intermediate_size=10240,
        num_hidden_layers=34,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=131072,
        rms_norm_eps=1e-6,
        query_pre_attn_scalar=256,
        sliding_window=1024,
        sliding_window_pattern=6,
        rope_theta=1_000_000.0,
        rope_local_base_freq=10_000.0,
        rope_scaling={"rope_type": "linear", "factor": 8.0},
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
    )
    spec = hf_config.spec_from_hf_config(published)
    assert spec == model_spec("gemma3-4b")
    monkeypatch.setattr(hf_config, "_transformers_major", lambda: 4)
    written = hf_config.hf_config_from_spec(spec)
    assert (written["rope_local_base_freq"], written["rope_scaling"]["factor"]) == (1e4, 8.0)
    assert hf_config.spec_from_hf_config(written) == spec
