"""Logit parity with transformers' Mixtral and Qwen3-MoE (torch, float32), both directions.

Tiny random models (2 layers, 4 experts, top-2, hidden 32) are saved by one side and run by the
other; weights are drawn large enough that a swapped expert or projection shows in the logits.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch (CPU) is the transformers reference; "
                                            "install the `test` extra to run parity tests.")
transformers = pytest.importorskip("transformers")

from parity_helpers import hf_logits, max_diff, random_params  # noqa: E402

from jaxtrain.interop.hf import load_hf_params, model_from_params, save_hf_checkpoint  # noqa: E402
from jaxtrain.interop.hf_config import hf_config_from_spec, spec_from_hf_config  # noqa: E402
from jaxtrain.models import ModelSpec  # noqa: E402
from jaxtrain.models.spec import ConfigError  # noqa: E402

VOCAB, SEQ = 96, 12
_TINY = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
             num_experts_per_tok=2)
HF_CASES = {
    "mixtral": ("MixtralConfig", dict(_TINY, intermediate_size=48, num_local_experts=4,
                                      rope_theta=1000000.0)),
    "qwen3_moe": ("Qwen3MoeConfig", dict(_TINY, head_dim=16, intermediate_size=64,
                                         moe_intermediate_size=24, num_experts=4,
                                         norm_topk_prob=True, decoder_sparse_step=1,
                                         mlp_only_layers=[], rope_theta=1000000.0)),
    "qwen3_moe-unnormalised": ("Qwen3MoeConfig", dict(
        _TINY, head_dim=8, intermediate_size=64, moe_intermediate_size=24, num_experts=4,
        norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[])),
}
_SPEC = dict(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
             head_dim=8, intermediate_size=64, max_seq_len=128, norm_eps=1e-6, init_std=0.2,
             num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24)
SPEC_CASES = {
    # Mixtral has one feed-forward size, the experts'.
    "mixtral": ModelSpec(family="mixtral", moe_score="topk_softmax",
                         **{**_SPEC, "intermediate_size": 24}),
    "qwen3_moe": ModelSpec(family="qwen3_moe", qk_norm=True, moe_score="softmax_topk",
                           moe_norm_topk=False, **_SPEC),
}


def _tokens() -> np.ndarray:
    return np.random.default_rng(0).integers(0, VOCAB, (2, SEQ), dtype=np.int32)


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_to_jaxtrain_logits(case, tmp_path):
    config_cls, kwargs = HF_CASES[case]
    torch.manual_seed(0)
    hf_model = transformers.AutoModelForCausalLM.from_config(
        getattr(transformers, config_cls)(**kwargs), attn_implementation="eager").eval()
    with torch.no_grad():
        for name, p in hf_model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.2)
    hf_model.save_pretrained(tmp_path)

    spec, params = load_hf_params(tmp_path)
    assert (spec.num_experts, spec.num_experts_per_tok) == (4, 2)
    tokens_BL = _tokens()
    ours = model_from_params(spec, params)(tokens_BL)
    ref = hf_logits(hf_model, tokens_BL)
    assert float(np.abs(ref).max()) > 1.0
    assert max_diff(ours, ref) < 1e-4


@pytest.mark.parametrize("case", sorted(SPEC_CASES))
def test_jaxtrain_tohf_logits(case, tmp_path):
    spec = SPEC_CASES[case]
    params = random_params(spec)
    save_hf_checkpoint(spec, params, tmp_path)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, attn_implementation="eager").eval()
    assert type(hf_model).__name__ == {"mixtral": "MixtralForCausalLM",
                                       "qwen3_moe": "Qwen3MoeForCausalLM"}[spec.family]
    tokens_BL = _tokens()
    ours = model_from_params(spec, params)(tokens_BL)
    ref = hf_logits(hf_model, tokens_BL)
    assert float(np.abs(ref).max()) > 1.0
    assert max_diff(ours, ref) < 1e-4
    # The written config reads back as the same spec (run-choice fields aside).
    assert spec_from_hf_config(tmp_path) == spec


def test_mixed_dense_and_expert_layers_are_rejected():
    cfg = hf_config_from_spec(SPEC_CASES["qwen3_moe"])
    with pytest.raises(ConfigError, match="mlp_only_layers"):
        spec_from_hf_config({**cfg, "mlp_only_layers": [0]})
    with pytest.raises(ConfigError, match="decoder_sparse_step"):
        spec_from_hf_config({**cfg, "decoder_sparse_step": 2})
    with pytest.raises(ConfigError, match="num_experts"):
        hf_config_from_spec(dataclasses.replace(SPEC_CASES["mixtral"], family="mistral"))
