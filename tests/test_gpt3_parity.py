"""GPT-3 (MaxText's gpt3 block): logit parity with transformers' `GPT2LMHeadModel` (torch,
float32) both ways, the one Hugging Face class with the same blocks, and the refusals of what
GPT-2 cannot express.

Hugging Face -> jaxtrain: a tiny random GPT-2 saved with `save_pretrained`, read with
`load_hf_params`. jaxtrain -> Hugging Face: the two-layer debug preset with random weights,
written with `save_hf_checkpoint` and loaded by `AutoModelForCausalLM`. Positions, LayerNorm
biases and every projection bias are drawn random, so each shows in the logits.
"""

from __future__ import annotations

import dataclasses

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

from jaxtrain.errors import ConfigError  # noqa: E402
from jaxtrain.interop.hf import load_hf_params, model_from_params  # noqa: E402
from jaxtrain.interop.hf_config import hf_config_from_spec, spec_from_hf_config  # noqa: E402
from jaxtrain.models.presets.registry import model_spec  # noqa: E402

VOCAB, SEQ = 160, 20
_TINY = dict(
    vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4, n_inner=96, resid_pdrop=0.0
)


@pytest.mark.parametrize("tied", [True, False])
def test_hf_gpt2_to_jaxtrain_logits(tied, tmp_path):
    config = transformers.GPT2Config(**_TINY, tie_word_embeddings=tied)
    hf_model = random_hf_model(config, std=0.2, param_std={"bias": 0.1})
    with torch.no_grad():  # LayerNorm scales near 1 (random_hf_model knows *norm.weight only)
        for name, p in hf_model.named_parameters():
            if ".ln_" in name and name.endswith(".weight"):
                p.uniform_(0.5, 1.5)
    hf_model.save_pretrained(tmp_path)
    spec, params = load_hf_params(tmp_path)
    assert (spec.family, spec.norm_type, spec.mlp_activation) == ("gpt3", "layer", "gelu")
    assert (spec.learned_positions, spec.tie_embeddings, spec.intermediate_size) == (64, tied, 96)
    tokens_BL = tokens(VOCAB, SEQ)
    ours = model_from_params(spec, params)(tokens_BL)
    assert ours.shape == (2, SEQ, VOCAB)
    assert_logits_match(ours, hf_model, tokens_BL, f"gpt2 tied={tied}")
    # The position table matters: a model given other positions gives other logits.
    shifted = model_from_params(spec, params)(tokens_BL, np.arange(SEQ)[None].repeat(2, 0) + 3)
    assert max_diff(shifted, hf_logits(hf_model, tokens_BL)) > 1e-3


def test_jaxtrain_gpt3_to_hf_logits(tmp_path):
    # Weights drawn wider than the init, so that the logits exceed 1 and the tolerance bites.
    spec = model_spec("gpt3-debug", vocab_size=VOCAB, init_std=0.15)
    params = random_params(spec)
    hf_model = exported_hf_model(spec, params, tmp_path, "GPT2LMHeadModel")
    tokens_BL = tokens(VOCAB, SEQ)
    assert_logits_match(model_from_params(spec, params)(tokens_BL), hf_model, tokens_BL, "gpt3")
    assert load_hf_params(tmp_path)[0] == spec


def test_gpt3_the_gpt2_class_cannot_express_is_refused_by_name():
    spec = model_spec("gpt3-debug")
    for change, named in (
        (dict(num_kv_heads=2), "model.num_kv_heads=2 cannot be written as GPT2LMHeadModel"),
        (dict(head_dim=32), "model.head_dim=32 cannot be written as GPT2LMHeadModel"),
        (dict(norm_zero_centered=True), "model.norm_zero_centered=True cannot be written"),
        (dict(o_bias=False), "model.o_bias=False cannot be written"),
    ):
        with pytest.raises(ConfigError, match=named):
            hf_config_from_spec(dataclasses.replace(spec, **change))
    # GPT-2's exact-erf GELU is another MLP than MaxText's tanh approximation.
    config = dict(architectures=["GPT2LMHeadModel"], **_TINY, activation_function="gelu")
    with pytest.raises(ConfigError, match="activation_function='gelu' is not supported"):
        spec_from_hf_config(config)
    # Other families refuse GPT-3's parts rather than dropping them.
    llama = model_spec("llama-debug", norm_type="layer")
    with pytest.raises(ConfigError, match="model.norm_type='layer' has no place in"):
        hf_config_from_spec(llama)
