"""Megatron (Primus) mixture-of-experts and multi-latent attention keys: the real MoE examples
become the zoo's presets, parameter for parameter, and layouts or policies jaxtrain cannot
reproduce are reported by key with the reason."""

import jax
import numpy as np
import pytest

from jaxtrain import compat
from jaxtrain.compat.megatron.expert_layers import expert_layout
from jaxtrain.errors import ConfigError
from jaxtrain.models.feedforward.moe import route
from jaxtrain.models.presets.registry import model_spec
from jaxtrain.models.spec.hyperparameters import ModelSpec

EXAMPLE = "Primus/examples/megatron/configs/MI300X/{}"
MIXTRAL = "mixtral_8x7B_v0.1-BF16-pretrain.yaml"
DEEPSEEK = "deepseek_v2_lite-BF16-pretrain.yaml"
QWEN3_MOE = "qwen3_30B_A3B-BF16-pretrain.yaml"
ARCH = (
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "rope_theta",
    "tie_embeddings",
    "qk_norm",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "moe_score",
    "moe_norm_topk",
    "moe_topk_method",
    "moe_routed_scaling",
    "moe_shared_experts",
    "num_dense_layers",
    "moe_layer_step",
    "moe_score_bias",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "rope_interleave",
    "rope_scaling",
    "rope_factor",
    "rope_original_max_len",
    "rope_mscale",
    "rope_mscale_all_dim",
    "family",
)


def load(samples, name, native=(), overrides=None, **kwargs):
    return compat.load_foreign(
        samples / EXAMPLE.format(name),
        overrides or {},
        env={},
        native_overrides=list(native),
        **kwargs,
    )


def spec_of(cfg):
    return ModelSpec.from_config(cfg.model)


def test_mixtral_8x7b_is_the_preset(compat_samples):
    cfg, report = load(compat_samples, MIXTRAL)
    spec, preset = spec_of(cfg), model_spec("mixtral-8x7b")
    assert spec.num_params() == preset.num_params() == 46_702_792_704
    assert {k: getattr(spec, k) for k in ARCH} == {k: getattr(preset, k) for k in ARCH}
    assert report.by_status("unsupported") == []
    # moe_aux_loss_coeff 1e-2 per layer, summed over 32 layers by Megatron; jaxtrain averages.
    assert spec.moe_aux_loss_coef == pytest.approx(0.32)
    assert report.entries["moe_ffn_hidden_size"].status != "unsupported"


def test_deepseek_v2_lite_with_mla_is_the_preset(compat_samples):
    # The Primus example switches MLA off; the model preset (deepseek_v2_lite.yaml) has it on.
    # The tokenizer's size is not known offline: the checkpoint's padded vocabulary is given.
    cfg, report = load(
        compat_samples,
        DEEPSEEK,
        ["multi_latent_attention=true"],
        {"model.vocab_size": 102400},
        allow_unsupported=True,
    )
    spec, preset = spec_of(cfg), model_spec("deepseek-v2-lite")
    assert spec.num_params() == preset.num_params() == 15_706_484_224
    assert {k: getattr(spec, k) for k in ARCH} == {k: getattr(preset, k) for k in ARCH}
    # DeepSeek's per-sequence balancing loss has no counterpart; everything else maps.
    assert [e.key for e in report.by_status("unsupported")] == ["moe_router_load_balancing_type"]
    assert "per-sequence" in report.entries["moe_router_load_balancing_type"].reason
    assert spec.moe_aux_loss_coef == pytest.approx(0.001 * 26)
    assert report.entries["qk_layernorm"].status == "mapped"  # the latent norms
    assert report.entries["kv_channels"].status == "ignored"


def test_deepseek_v2_lite_example_as_shipped_is_mha(compat_samples):
    cfg, report = load(
        compat_samples,
        DEEPSEEK,
        ["moe_router_load_balancing_type=aux_loss"],
        {"model.vocab_size": 102400},
    )
    spec = spec_of(cfg)
    assert not spec.mla and (spec.num_heads, spec.num_kv_heads, spec.head_dim) == (16, 16, 128)
    assert spec.qk_norm and spec.rope_scaling == "none"
    assert (spec.num_experts, spec.num_dense_layers, spec.moe_shared_experts) == (64, 1, 2)
    assert report.entries["rotary_scaling_factor"].status == "ignored"


def test_qwen3_30b_a3b_matches_the_preset_up_to_the_tokenizer(compat_samples):
    cfg, report = load(compat_samples, QWEN3_MOE, overrides={"model.vocab_size": 151936})
    spec, preset = spec_of(cfg), model_spec("qwen3-30b-a3b")
    assert spec.num_params() == preset.num_params()
    same = [k for k in ARCH if k not in ("moe_score", "family")]
    assert {k: getattr(spec, k) for k in same} == {k: getattr(preset, k) for k in same}
    assert report.by_status("unsupported") == []
    # Megatron's softmax over the top-k logits is Qwen3's renormalised softmax_topk.
    assert spec.moe_score == "topk_softmax"
    logits = jax.random.normal(jax.random.key(0), (16, 128)) * 3
    ours = route(logits, 8, "topk_softmax", True)
    theirs = route(logits, 8, "softmax_topk", True)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5)
    np.testing.assert_array_equal(ours[1], theirs[1])


def test_expert_layouts():
    assert expert_layout(1, 4) == (0, 1, "")
    assert expert_layout("([0]*3+[1]*58)", 61) == (3, 1, "")
    assert expert_layout("[0,1]*24", 48) == (0, 2, "")
    dense, step, why = expert_layout(2, 6)  # Megatron: blocks 0, 2, 4
    assert "experts in blocks 0, 2, 4 of 0-5" in why
    # Unsupported, but as many expert blocks as the file has, so its parameter count holds.
    assert (dense, step) == (0, 2) and "the same 3 expert blocks sit in blocks 1, 3, ..." in why
    dense, step, why = expert_layout("[1,1,0,1]", 4)
    assert "experts in blocks 0-1, 3" in why and (dense, step) == (1, 1)
    with pytest.raises(ConfigError, match="gives 3 layers but num_layers=4"):
        expert_layout("[1,1,1]", 4)


def test_unsupported_moe_settings_name_the_key(compat_samples):
    with pytest.raises(ConfigError, match=r"moe_layer_freq=2.*blocks 0, 2, 4"):
        load(compat_samples, MIXTRAL, ["moe_layer_freq=2"])
    # A shared size that is no multiple of the experts' is one shared expert of that size.
    cfg, _ = load(compat_samples, MIXTRAL, ["moe_shared_expert_intermediate_size=10000"])
    assert (cfg.model.moe_shared_experts, cfg.model.moe_shared_intermediate_size) == (1, 10000)
    with pytest.raises(ConfigError, match="moe_token_drop_policy='probs'"):
        load(compat_samples, MIXTRAL, ["moe_expert_capacity_factor=1.25"])
    cfg, report = load(
        compat_samples,
        MIXTRAL,
        ["moe_expert_capacity_factor=1.25", "moe_token_drop_policy=position"],
    )
    assert cfg.model.moe_capacity_factor == 1.25
    with pytest.raises(ConfigError, match="moe_router_num_groups"):
        load(
            compat_samples,
            MIXTRAL,
            [
                "num_experts=16",
                "moe_router_topk=6",
                "moe_router_num_groups=4",
                "moe_router_group_topk=2",
                "moe_router_pre_softmax=true",
            ],
        )
    with pytest.raises(ConfigError, match="moe_router_enable_expert_bias"):
        load(compat_samples, MIXTRAL, ["moe_router_enable_expert_bias=true"])


def test_deepseek_v3_style_router(compat_samples):
    """Sigmoid scores, aux-free bias, 8 groups ranked by their best two (noaux_tc)."""
    cfg, report = load(
        compat_samples,
        MIXTRAL,
        [
            "num_experts=64",
            "moe_router_topk=8",
            "moe_router_score_function=sigmoid",
            "moe_router_num_groups=8",
            "moe_router_group_topk=4",
            "moe_router_enable_expert_bias=true",
            "moe_router_bias_update_rate=0.001",
            "moe_router_topk_scaling_factor=2.5",
            "moe_ffn_hidden_size=1024",
            "moe_shared_expert_intermediate_size=1024",
            "moe_layer_freq=([0]*3+[1]*29)",
            "moe_z_loss_coeff=0.001",
        ],
    )
    m = cfg.model
    assert (m.moe_score, m.moe_norm_topk, m.moe_topk_method, m.moe_n_group, m.moe_topk_group) == (
        "sigmoid",
        True,
        "noaux_tc",
        8,
        4,
    )
    assert (m.moe_score_bias, m.moe_bias_update_rate, m.moe_routed_scaling) == (True, 0.001, 2.5)
    assert (m.moe_shared_experts, m.num_dense_layers) == (1, 3)
    assert m.moe_z_loss_coef == pytest.approx(0.001 * 29)
    assert report.by_status("unsupported") == []


@pytest.mark.parametrize("pattern", ["M*M-", "M*E-"])
def test_a_megatron_hybrid_with_squared_relu_builds_relu2_mlps_and_experts(compat_samples, pattern):
    # Nemotron-H / Nemotron 3 in Megatron: model_type mamba, squared ReLU for the MLP
    # sublayers and the experts alike, a shared expert of its own size.
    native = [
        f"hybrid_override_pattern={pattern * 12}",
        "squared_relu=true",
        "swiglu=false",
        "num_attention_heads=16",
        "num_query_groups=4",
    ]
    if "E" in pattern:
        native += [
            "num_experts=8",
            "moe_ffn_hidden_size=64",
            "moe_shared_expert_intermediate_size=96",
            "moe_router_topk=2",
            "moe_router_score_function=sigmoid",
            "moe_router_enable_expert_bias=true",
        ]
    cfg, report = load(compat_samples, "mamba_370M-pretrain.yaml", native)
    spec = spec_of(cfg)
    assert spec.mlp_activation == "relu2"
    keys = {e.key: e for e in report.entries.values()}
    assert keys["squared_relu"].status == "mapped"
    if "E" in pattern:
        assert spec.family == "hybrid" and spec.moe_activation == "relu2"
        assert (spec.moe_shared_experts, spec.shared_expert_size()) == (1, 96)
        assert spec.moe_score == "sigmoid" and spec.moe_score_bias
