"""Logit parity with transformers' state-space models (torch, float32), both directions:
Mamba-1 (`MambaForCausalLM`), Mamba-2 (`Mamba2ForCausalLM`) and Nemotron-H hybrids
(`NemotronHForCausalLM`: Mamba-2, no-RoPE attention, relu2 MLP and mixture-of-experts
sublayers in Megatron's pattern string). Tiny random models with weights of realistic scale, on sequences that span
several scan chunks and end inside one.
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
    random_hf_model,
    random_params,
    tokens,
)

from jaxtrain.interop.hf import load_hf_params, model_from_params  # noqa: E402
from jaxtrain.interop.hf_config import spec_from_hf_config  # noqa: E402
from jaxtrain.models.presets.registry import model_spec  # noqa: E402

VOCAB, SEQ = 96, 11
_MAMBA2 = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    state_size=8,
    num_heads=8,
    head_dim=8,
    expand=2,
    n_groups=2,
    conv_kernel=4,
    chunk_size=4,
    tie_word_embeddings=False,
)
_MAMBA = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    state_size=8,
    expand=2,
    conv_kernel=4,
    time_step_rank=4,
    tie_word_embeddings=True,
)
_NEMOTRON = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    hybrid_override_pattern="M*M-",
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    intermediate_size=48,
    ssm_state_size=8,
    mamba_num_heads=4,
    mamba_head_dim=8,
    n_groups=2,
    conv_kernel=4,
    chunk_size=4,
    max_position_embeddings=64,
    tie_word_embeddings=False,
)
# Nemotron-H with mixture-of-experts sublayers (Nemotron 3's kind): relu2 experts and a relu2
# shared expert of its own size, a sigmoid router with score-correction bias, grouped top-k.
_MOE = dict(
    n_routed_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
    moe_shared_expert_intermediate_size=24,
    n_group=2,
    topk_group=1,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
)
_NEMOTRON_MOE = dict(_NEMOTRON, hybrid_override_pattern="M*E-ME", **_MOE)
# std per parameter: A_log and dt_bias keep decays and steps in a realistic range.
_PARAM_STD = {
    "A_log": 0.5,
    "dt_bias": 0.5,
    "D": 0.5,
    "lm_head.weight": 0.6,
    "embeddings.weight": 0.6,
}
CASES = {
    "mamba2": (transformers.Mamba2Config, _MAMBA2, "Mamba2ForCausalLM"),
    "mamba": (transformers.MambaConfig, _MAMBA, "MambaForCausalLM"),
    "nemotron_h": (transformers.NemotronHConfig, _NEMOTRON, "NemotronHForCausalLM"),
    "nemotron_h_moe": (transformers.NemotronHConfig, _NEMOTRON_MOE, "NemotronHForCausalLM"),
}
# The score-correction bias, large enough to change which experts win.
_BUFFER_STD = {"e_score_correction_bias": 0.3}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hf_to_jaxtrain_logits(case, tmp_path):
    config_cls, kwargs, _ = CASES[case]
    hf_model = random_hf_model(config_cls(**kwargs), param_std=_PARAM_STD, buffer_std=_BUFFER_STD)
    hf_model.save_pretrained(tmp_path)
    spec, params = load_hf_params(tmp_path)
    assert spec.family == case.removesuffix("_moe")
    assert spec.num_params() == sum(p.numel() for p in hf_model.parameters())
    tokens_BL = tokens(VOCAB, SEQ)
    for chunk in (4, 3, 64):  # the chunk length changes the schedule, not the result
        chunked = dataclasses.replace(spec, ssm_chunk_size=chunk)
        assert_logits_match(
            model_from_params(chunked, params)(tokens_BL),
            hf_model,
            tokens_BL,
            f"{case} chunk {chunk}",
        )


PRESETS = {
    "mamba2": ("mamba2-debug", "Mamba2ForCausalLM"),
    "mamba": ("mamba-debug", "MambaForCausalLM"),
    "nemotron_h": ("nemotron-h-debug", "NemotronHForCausalLM"),
    "nemotron_h_moe": ("nemotron-h-moe-debug", "NemotronHForCausalLM"),
}


@pytest.mark.parametrize("case", sorted(PRESETS))
def test_jaxtrain_to_hf_logits(case, tmp_path):
    name, arch = PRESETS[case]
    spec = model_spec(name, vocab_size=VOCAB, init_std=0.2, ssm_chunk_size=4)
    params = random_params(spec)
    hf_model = exported_hf_model(spec, params, tmp_path, arch)
    assert spec.num_params() == sum(p.numel() for p in hf_model.parameters())
    tokens_BL = tokens(VOCAB, SEQ)
    assert_logits_match(model_from_params(spec, params)(tokens_BL), hf_model, tokens_BL, case)
    read = spec_from_hf_config(tmp_path)
    # Mamba configs hold no context length; Mamba-1's hold no chunk length (a speed knob);
    # none holds the training-time rate of the router's bias updates.
    kept = ("max_seq_len", "ssm_chunk_size", "moe_bias_update_rate")
    assert dataclasses.replace(read, **{k: getattr(spec, k) for k in kept}) == spec
