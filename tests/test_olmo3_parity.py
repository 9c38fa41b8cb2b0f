"""OLMo 3: logit parity with transformers' `Olmo3ForCausalLM` (torch, float32) both ways, the
presets' counts against transformers', and the published config.json read as the preset.

Hugging Face -> jaxtrain: a tiny random transformers model saved with `save_pretrained`, read
with `load_hf_params`. jaxtrain -> Hugging Face: the two-layer debug preset (one sliding, one
global block) with random weights, written with `save_hf_checkpoint` and loaded by
`AutoModelForCausalLM`. The window is shorter than the sequence and the global block's RoPE
is YaRN-scaled while the sliding one's is not, so each feature shows in the logits.
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

from jaxtrain.errors import ConfigError  # noqa: E402
from jaxtrain.interop import hf_config  # noqa: E402
from jaxtrain.interop.hf import load_hf_params, model_from_params  # noqa: E402
from jaxtrain.models.presets.registry import PUBLISHED_PARAMS, model_spec  # noqa: E402

VOCAB, SEQ = 160, 20
# Layer 0 slides (window 6) with the unscaled table, layer 1 is global with YaRN.
_TINY = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-6,
    sliding_window=6,
    layer_types=["sliding_attention", "full_attention"],
    rope_parameters={
        "full_attention": {
            "rope_type": "yarn",
            "rope_theta": 10_000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 32,
        },
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    },
)


def test_hf_olmo3_to_jaxtrain_logits(tmp_path):
    hf_model = random_hf_model(transformers.Olmo3Config(**_TINY), std=0.15)
    hf_model.save_pretrained(tmp_path)
    spec, params = load_hf_params(tmp_path)
    assert (spec.family, spec.pre_norms, spec.post_norms) == ("olmo3", False, True)
    assert (spec.sliding_window, spec.global_layer_step) == (6, 2)
    assert (spec.rope_scaling, spec.rope_local_theta) == ("yarn", 10_000.0)
    tokens_BL = tokens(VOCAB, SEQ)
    ours = model_from_params(spec, params)(tokens_BL)
    assert ours.shape == (2, SEQ, VOCAB)
    assert_logits_match(ours, hf_model, tokens_BL, "olmo3")
    # The sliding block's own (unscaled) table matters: with the YaRN one there too, the
    # logits move away.
    ref = hf_logits(hf_model, tokens_BL)
    scaled_everywhere = dataclasses.replace(spec, rope_local_theta=0.0)
    assert max_diff(model_from_params(scaled_everywhere, params)(tokens_BL), ref) > 1e-3


def test_jaxtrain_olmo3_to_hf_logits(tmp_path):
    # Weights drawn wider than the init, so that the logits exceed 1 and the tolerance bites.
    spec = model_spec("olmo3-debug", vocab_size=VOCAB, init_std=0.15)
    params = random_params(spec)
    hf_model = exported_hf_model(spec, params, tmp_path, "Olmo3ForCausalLM")
    tokens_BL = tokens(VOCAB, SEQ)
    assert_logits_match(model_from_params(spec, params)(tokens_BL), hf_model, tokens_BL, "olmo3")
    assert load_hf_params(tmp_path)[0] == spec


@pytest.mark.parametrize("preset", ["olmo3-7b", "olmo3-32b"])
def test_olmo3_presets_count_like_transformers(preset):
    # The published config.json sizes, written out apart from the presets.
    sizes = {
        "olmo3-7b": dict(
            hidden_size=4096,
            intermediate_size=11008,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=32,
        ),
        "olmo3-32b": dict(
            hidden_size=5120,
            intermediate_size=27648,
            num_hidden_layers=64,
            num_attention_heads=40,
            num_key_value_heads=8,
        ),
    }[preset]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.Olmo3Config(vocab_size=100278, **sizes)
        )
    count = sum(p.numel() for p in model.parameters())
    assert count == PUBLISHED_PARAMS[preset] == model_spec(preset).num_params()


def _published_7b() -> dict:
    """allenai/Olmo-3-1025-7B's config.json as transformers 4 writes it (YaRN in rope_scaling,
    the attention factor spelled out)."""
    return dict(
        architectures=["Olmo3ForCausalLM"],
        model_type="olmo3",
        vocab_size=100278,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        hidden_act="silu",
        max_position_embeddings=65536,
        rms_norm_eps=1e-6,
        attention_bias=False,
        tie_word_embeddings=False,
        sliding_window=4096,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
        rope_theta=500_000,
        rope_scaling=dict(
            rope_type="yarn",
            factor=8.0,
            original_max_position_embeddings=8192,
            attention_factor=1.2079441541679836,
            beta_fast=32,
            beta_slow=1,
        ),
    )


def test_a_transformers4_olmo3_config_reads_as_the_preset(monkeypatch):
    published = _published_7b()
    published["layer_types"] = published["layer_types"] * 8
    spec = hf_config.spec_from_hf_config(published)
    assert spec == model_spec("olmo3-7b")
    monkeypatch.setattr(hf_config, "_transformers_major", lambda: 4)
    written = hf_config.hf_config_from_spec(spec)
    assert (written["rope_theta"], written["rope_scaling"]["factor"]) == (500_000.0, 8.0)
    assert hf_config.spec_from_hf_config(written) == spec
    # A YaRN attention factor other than the default one is refused by name.
    published["rope_scaling"]["attention_factor"] = 1.5
    with pytest.raises(ConfigError, match="attention_factor=1.5"):
        hf_config.spec_from_hf_config(published)


def test_olmo3_layer_types_jaxtrain_cannot_build_are_refused():
    published = _published_7b()
    published["layer_types"] = ["full_attention", "sliding_attention"] * 16
    with pytest.raises(ConfigError, match="layer_types="):
        hf_config.spec_from_hf_config(published)
    # Scaled RoPE on the sliding layers has no place in Olmo3ForCausalLM.
    with pytest.raises(ConfigError, match="model.rope_local_theta=0.0 cannot be written"):
        hf_config.hf_config_from_spec(model_spec("olmo3-7b", rope_local_theta=0.0))
