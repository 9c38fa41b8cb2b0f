"""Named architectures with their published hyperparameters, plus a tiny debug size per family.

Full-size values are those of each model's Hugging Face `config.json`. `model_config(name)`
returns a ConfigDict of every `ModelSpec` field, ready to sit in `config.model` and be overridden
key by key (`--config.model.num_layers=2`).
"""

from __future__ import annotations

import dataclasses

from ml_collections import ConfigDict

from jaxtrain.errors import ConfigError
from jaxtrain.models.presets_ssm import SSM_PRESETS, SSM_PUBLISHED_PARAMS
from jaxtrain.models.spec import ModelSpec

# Shared per-family values; each preset adds its sizes.
_LLAMA2 = dict(
    family="llama",
    vocab_size=32000,
    norm_eps=1e-5,
    rope_theta=10000.0,
    max_seq_len=4096,
    head_dim=128,
)
_LLAMA3 = dict(
    family="llama",
    vocab_size=128256,
    norm_eps=1e-5,
    rope_theta=500000.0,
    max_seq_len=8192,
    head_dim=128,
)
# Llama 3.1 onwards: 128K context through "llama3" RoPE scaling of the 8K-trained frequencies.
_LLAMA31 = dict(
    _LLAMA3,
    max_seq_len=131072,
    rope_scaling="llama3",
    rope_factor=8.0,
    rope_low_freq_factor=1.0,
    rope_high_freq_factor=4.0,
    rope_original_max_len=8192,
)
_LLAMA32 = dict(_LLAMA31, rope_factor=32.0, tie_embeddings=True)
_QWEN25 = dict(
    family="qwen2",
    vocab_size=152064,
    norm_eps=1e-6,
    rope_theta=1000000.0,
    max_seq_len=131072,
    head_dim=128,
    qkv_bias=True,
)
_QWEN3 = dict(
    family="qwen3",
    vocab_size=151936,
    norm_eps=1e-6,
    rope_theta=1000000.0,
    max_seq_len=40960,
    head_dim=128,
    qk_norm=True,
)
# Mixtures of experts. Aux-loss weights are the published `router_aux_loss_coef` times top-k:
# jaxtrain's balancing loss counts assignments, transformers' counts tokens (k times larger).
_MIXTRAL = dict(
    family="mixtral",
    vocab_size=32000,
    norm_eps=1e-5,
    rope_theta=1000000.0,
    max_seq_len=32768,
    head_dim=128,
    num_experts=8,
    num_experts_per_tok=2,
    moe_score="topk_softmax",
    moe_aux_loss_coef=0.04,
)
_QWEN3_MOE = dict(
    _QWEN3,
    family="qwen3_moe",
    num_experts=128,
    num_experts_per_tok=8,
    moe_score="softmax_topk",
    moe_norm_topk=True,
    moe_aux_loss_coef=0.008,
)
# DeepSeek: multi-head latent attention with YaRN (40x a 4K context, interleaved rotary pairs),
# leading dense blocks, shared experts; head_dim / num_kv_heads mirror transformers' config
# (qk_rope_head_dim, num_heads) though MLA does not use them. Aux-loss weights are the published
# `aux_loss_alpha`: DeepSeek's f_i is E x the assignment fraction, so its loss is alpha x ours.
_MLA = dict(
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    head_dim=64,
    rope_interleave=True,
    rope_theta=10000.0,
    rope_scaling="yarn",
    rope_factor=40.0,
    rope_original_max_len=4096,
    rope_beta_fast=32.0,
    rope_beta_slow=1.0,
    norm_eps=1e-6,
    max_seq_len=163840,
)
_DEEPSEEK_V2 = dict(
    _MLA,
    family="deepseek_v2",
    vocab_size=102400,
    rope_mscale=0.707,
    rope_mscale_all_dim=0.707,
    num_experts_per_tok=6,
    moe_score="softmax_topk",
    moe_norm_topk=False,
    moe_shared_experts=2,
    num_dense_layers=1,
)
# V3: sigmoid routing over 8 groups with the aux-free expert bias (update rate from the paper).
_DEEPSEEK_V3 = dict(
    _MLA,
    family="deepseek_v3",
    vocab_size=129280,
    rope_mscale=1.0,
    rope_mscale_all_dim=1.0,
    num_experts_per_tok=8,
    moe_score="sigmoid",
    moe_norm_topk=True,
    moe_topk_method="noaux_tc",
    moe_n_group=8,
    moe_topk_group=4,
    moe_routed_scaling=2.5,
    moe_shared_experts=1,
    num_dense_layers=3,
    moe_score_bias=True,
    moe_bias_update_rate=0.001,
    moe_aux_loss_coef=0.001,
)
# gpt-oss: alternating 128-token sliding and full attention with per-head sinks, biased q/k/v/o,
# biased top-4 softmax routing to biased experts with a clamped SwiGLU, YaRN without rounding
# its ramp. The published router_aux_loss_coef 0.9 counts tokens; x top-k for assignments.
_GPT_OSS = dict(
    family="gpt_oss",
    vocab_size=201088,
    hidden_size=2880,
    num_heads=64,
    num_kv_heads=8,
    head_dim=64,
    intermediate_size=2880,
    moe_intermediate_size=2880,
    max_seq_len=131072,
    norm_eps=1e-5,
    rope_theta=150000.0,
    rope_scaling="yarn",
    rope_factor=32.0,
    rope_original_max_len=4096,
    rope_beta_fast=32.0,
    rope_beta_slow=1.0,
    rope_truncate=False,
    sliding_window=128,
    global_layer_step=2,
    attention_sinks=True,
    qkv_bias=True,
    o_bias=True,
    num_experts_per_tok=4,
    moe_score="topk_softmax",
    moe_router_bias=True,
    moe_expert_bias=True,
    moe_activation="clamped_swiglu",
    moe_swiglu_alpha=1.702,
    moe_swiglu_limit=7.0,
    moe_aux_loss_coef=3.6,
)
# Llama 4: 8192-token chunked attention with interleaved-pair RoPE on three of every four
# blocks, global NoPE attention with temperature tuning on the fourth; top-1 sigmoid routing
# that weights the expert input, plus a shared expert; dense blocks (when experts interleave)
# use the wider intermediate_size_mlp.
_LLAMA4 = dict(
    family="llama4",
    vocab_size=202048,
    hidden_size=5120,
    num_layers=48,
    num_heads=40,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=16384,
    moe_intermediate_size=8192,
    norm_eps=1e-5,
    rope_theta=500000.0,
    rope_interleave=True,
    attention_chunk=8192,
    global_layer_step=4,
    nope_global=True,
    attn_temperature_tuning=True,
    attn_floor_scale=8192.0,
    attn_scale=0.1,
    num_experts_per_tok=1,
    moe_score="topk_sigmoid",
    moe_weight_inputs=True,
    moe_shared_experts=1,
    moe_aux_loss_coef=0.001,
)
# Grok (xAI): every block top-2 of 8 GELU-gated experts, softmax over all experts with the kept
# probabilities not renormalised, attention scores soft-capped at 30, norms on the attention
# and MLP outputs too. Grok-1 (xai-org/grok-1's run.py and model.py): tied embeddings scaled by
# sqrt(6144) in and 1/sqrt(3) out, RoPE base 10000. Grok-2 (its config.json, SGLang's grok.py):
# a dense GeGLU beside the experts ((mlp + moe) / sqrt(2)), router logits capped at 30 and
# output logits at 50, untied output scaled by 1/2, a log2 query temperature past 1024 tokens,
# RoPE base 208533496 ("original" rope_type: unscaled).
_GROK = dict(
    family="grok",
    vocab_size=131072,
    norm_eps=1e-5,
    head_dim=128,
    num_kv_heads=8,
    num_experts=8,
    num_experts_per_tok=2,
    moe_score="softmax_topk",
    moe_norm_topk=False,
    moe_activation="geglu",
    mlp_activation="geglu",
    attn_logit_softcap=30.0,
    post_norms=True,
    num_layers=64,
)
# Tiny sizes for tests and smoke runs (two layers, dims <= 64).
_DEBUG = dict(
    vocab_size=512,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    max_seq_len=512,
)
# What the two DeepSeek debug sizes share: latent attention, YaRN, 8 experts in 4 groups.
_DEEPSEEK_DEBUG = dict(
    _DEBUG,
    norm_eps=1e-6,
    num_kv_heads=4,
    head_dim=8,
    kv_lora_rank=32,
    q_lora_rank=24,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=16,
    rope_interleave=True,
    rope_scaling="yarn",
    rope_factor=4.0,
    rope_original_max_len=128,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    moe_n_group=4,
    moe_topk_group=2,
    moe_shared_experts=1,
    num_dense_layers=1,
)

PRESETS: dict[str, dict] = {
    "llama-debug": dict(_DEBUG, family="llama"),
    # A short original context so all three bands of the llama3 scaling occur at head_dim 16.
    "llama3-debug": dict(
        _DEBUG,
        family="llama",
        rope_theta=500000.0,
        max_seq_len=1024,
        rope_scaling="llama3",
        rope_factor=8.0,
        rope_low_freq_factor=1.0,
        rope_high_freq_factor=4.0,
        rope_original_max_len=128,
    ),
    "qwen2-debug": dict(_DEBUG, family="qwen2", norm_eps=1e-6, rope_theta=1000000.0, qkv_bias=True),
    "qwen3-debug": dict(_DEBUG, family="qwen3", norm_eps=1e-6, rope_theta=1000000.0, qk_norm=True),
    "mistral-debug": dict(_DEBUG, family="mistral", sliding_window=32),
    "mixtral-debug": dict(
        _DEBUG,
        family="mixtral",
        rope_theta=1000000.0,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        moe_score="topk_softmax",
        moe_aux_loss_coef=0.04,
    ),
    "qwen3-moe-debug": dict(
        _DEBUG,
        family="qwen3_moe",
        norm_eps=1e-6,
        rope_theta=1000000.0,
        qk_norm=True,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        moe_score="softmax_topk",
        moe_norm_topk=True,
        moe_aux_loss_coef=0.002,
    ),
    # One dense block then one expert block; grouped routing, shared expert, YaRN on a 128-token
    # original context so every band of the ramp occurs at 8 rotary dims.
    "deepseek-v2-debug": dict(
        _DEEPSEEK_DEBUG,
        family="deepseek_v2",
        rope_mscale=0.707,
        rope_mscale_all_dim=0.707,
        moe_score="softmax_topk",
        moe_norm_topk=False,
        moe_topk_method="group_limited_greedy",
        moe_routed_scaling=2.0,
        moe_aux_loss_coef=0.003,
    ),
    "deepseek-v3-debug": dict(
        _DEEPSEEK_DEBUG,
        family="deepseek_v3",
        rope_mscale=1.0,
        rope_mscale_all_dim=1.0,
        moe_score="sigmoid",
        moe_norm_topk=True,
        moe_topk_method="noaux_tc",
        moe_routed_scaling=2.5,
        moe_score_bias=True,
        moe_bias_update_rate=0.001,
        moe_aux_loss_coef=0.001,
    ),
    # A sliding block then a full one; YaRN on a 128-token original context, ramp unrounded.
    "gpt-oss-debug": dict(
        _DEBUG,
        family="gpt_oss",
        intermediate_size=32,
        norm_eps=1e-5,
        rope_theta=150000.0,
        rope_scaling="yarn",
        rope_factor=4.0,
        rope_original_max_len=128,
        rope_truncate=False,
        sliding_window=8,
        global_layer_step=2,
        attention_sinks=True,
        qkv_bias=True,
        o_bias=True,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        moe_score="topk_softmax",
        moe_router_bias=True,
        moe_expert_bias=True,
        moe_activation="clamped_swiglu",
        moe_aux_loss_coef=0.02,
    ),
    # A dense chunked-RoPE block then an expert global-NoPE block (shared expert, top-1).
    "llama4-debug": dict(
        _DEBUG,
        family="llama4",
        rope_theta=500000.0,
        rope_interleave=True,
        attention_chunk=16,
        global_layer_step=2,
        nope_global=True,
        qk_l2_norm=True,
        attn_temperature_tuning=True,
        attn_floor_scale=4.0,
        attn_scale=0.1,
        num_experts=4,
        num_experts_per_tok=1,
        moe_intermediate_size=32,
        moe_score="topk_sigmoid",
        moe_weight_inputs=True,
        moe_shared_experts=1,
        moe_layer_step=2,
        moe_aux_loss_coef=0.001,
    ),
    # Grok-1's blocks (tied, scaled embeddings) and Grok-2's (residual MLP, router and output
    # caps, query temperature past 8 tokens) at two layers.
    "grok-debug": dict(
        _DEBUG,
        **{
            k: v
            for k, v in _GROK.items()
            if k not in ("vocab_size", "head_dim", "num_kv_heads", "num_layers")
        },
        moe_intermediate_size=32,
        tie_embeddings=True,
        embed_multiplier=8.0,
        output_multiplier=0.5773502691896257,
    ),
    "grok2-debug": dict(
        _DEBUG,
        **{
            k: v
            for k, v in _GROK.items()
            if k not in ("vocab_size", "head_dim", "num_kv_heads", "num_layers")
        },
        intermediate_size=64,
        moe_intermediate_size=32,
        moe_residual_mlp=True,
        router_logit_softcap=30.0,
        final_logit_softcap=50.0,
        embed_multiplier=8.0,
        output_multiplier=0.5,
        attn_temperature_len=8,
        rope_theta=208533496.0,
    ),
    "llama2-7b": dict(
        _LLAMA2,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        intermediate_size=11008,
    ),
    "llama2-13b": dict(
        _LLAMA2,
        hidden_size=5120,
        num_layers=40,
        num_heads=40,
        num_kv_heads=40,
        intermediate_size=13824,
    ),
    "llama2-70b": dict(
        _LLAMA2,
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        intermediate_size=28672,
    ),
    "llama3-8b": dict(
        _LLAMA3,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=14336,
    ),
    "llama3-70b": dict(
        _LLAMA3,
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        intermediate_size=28672,
    ),
    "llama3.1-8b": dict(
        _LLAMA31,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=14336,
    ),
    "llama3.1-70b": dict(
        _LLAMA31,
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        intermediate_size=28672,
    ),
    "llama3.1-405b": dict(
        _LLAMA31,
        hidden_size=16384,
        num_layers=126,
        num_heads=128,
        num_kv_heads=8,
        intermediate_size=53248,
    ),
    "llama3.2-1b": dict(
        _LLAMA32,
        hidden_size=2048,
        num_layers=16,
        num_heads=32,
        num_kv_heads=8,
        head_dim=64,
        intermediate_size=8192,
    ),
    "llama3.2-3b": dict(
        _LLAMA32,
        hidden_size=3072,
        num_layers=28,
        num_heads=24,
        num_kv_heads=8,
        intermediate_size=8192,
    ),
    "llama3.3-70b": dict(
        _LLAMA31,
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        intermediate_size=28672,
    ),
    # The 3B keeps the smaller vocabulary padding, a 32K context and tied embeddings.
    "qwen2.5-3b": dict(
        _QWEN25,
        vocab_size=151936,
        max_seq_len=32768,
        tie_embeddings=True,
        hidden_size=2048,
        num_layers=36,
        num_heads=16,
        num_kv_heads=2,
        intermediate_size=11008,
    ),
    "qwen2.5-7b": dict(
        _QWEN25,
        hidden_size=3584,
        num_layers=28,
        num_heads=28,
        num_kv_heads=4,
        intermediate_size=18944,
    ),
    "qwen2.5-14b": dict(
        _QWEN25,
        norm_eps=1e-5,
        hidden_size=5120,
        num_layers=48,
        num_heads=40,
        num_kv_heads=8,
        intermediate_size=13824,
    ),
    "qwen2.5-32b": dict(
        _QWEN25,
        norm_eps=1e-5,
        hidden_size=5120,
        num_layers=64,
        num_heads=40,
        num_kv_heads=8,
        intermediate_size=27648,
    ),
    "qwen2.5-72b": dict(
        _QWEN25,
        norm_eps=1e-5,
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        intermediate_size=29568,
    ),
    "qwen3-0.6b": dict(
        _QWEN3,
        tie_embeddings=True,
        hidden_size=1024,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        intermediate_size=3072,
    ),
    "qwen3-1.7b": dict(
        _QWEN3,
        tie_embeddings=True,
        hidden_size=2048,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        intermediate_size=6144,
    ),
    "qwen3-4b": dict(
        _QWEN3,
        tie_embeddings=True,
        hidden_size=2560,
        num_layers=36,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=9728,
    ),
    "qwen3-8b": dict(
        _QWEN3,
        hidden_size=4096,
        num_layers=36,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=12288,
    ),
    "qwen3-14b": dict(
        _QWEN3,
        hidden_size=5120,
        num_layers=40,
        num_heads=40,
        num_kv_heads=8,
        intermediate_size=17408,
    ),
    "qwen3-32b": dict(
        _QWEN3,
        hidden_size=5120,
        num_layers=64,
        num_heads=64,
        num_kv_heads=8,
        intermediate_size=25600,
    ),
    # Mistral 7B v0.1: Llama 2 vocabulary, GQA, and a 4096-token sliding attention window.
    "mistral-7b": dict(
        family="mistral",
        vocab_size=32000,
        norm_eps=1e-5,
        rope_theta=10000.0,
        max_seq_len=32768,
        sliding_window=4096,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
    ),
    "mixtral-8x7b": dict(
        _MIXTRAL,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=14336,
        moe_intermediate_size=14336,
    ),
    "mixtral-8x22b": dict(
        _MIXTRAL,
        vocab_size=32768,
        max_seq_len=65536,
        hidden_size=6144,
        num_layers=56,
        num_heads=48,
        num_kv_heads=8,
        intermediate_size=16384,
        moe_intermediate_size=16384,
    ),
    "qwen3-30b-a3b": dict(
        _QWEN3_MOE,
        hidden_size=2048,
        num_layers=48,
        num_heads=32,
        num_kv_heads=4,
        intermediate_size=6144,
        moe_intermediate_size=768,
    ),
    "qwen3-235b-a22b": dict(
        _QWEN3_MOE,
        hidden_size=4096,
        num_layers=94,
        num_heads=64,
        num_kv_heads=4,
        intermediate_size=12288,
        moe_intermediate_size=1536,
    ),
    # DeepSeek-V2-Lite: no query compression, plain top-6 of 64 experts.
    "deepseek-v2-lite": dict(
        _DEEPSEEK_V2,
        hidden_size=2048,
        num_layers=27,
        num_heads=16,
        num_kv_heads=16,
        intermediate_size=10944,
        moe_intermediate_size=1408,
        num_experts=64,
        moe_aux_loss_coef=0.001,
    ),
    "deepseek-v2": dict(
        _DEEPSEEK_V2,
        hidden_size=5120,
        num_layers=60,
        num_heads=128,
        num_kv_heads=128,
        intermediate_size=12288,
        moe_intermediate_size=1536,
        num_experts=160,
        q_lora_rank=1536,
        moe_topk_method="group_limited_greedy",
        moe_n_group=8,
        moe_topk_group=3,
        moe_routed_scaling=16.0,
        moe_aux_loss_coef=0.003,
    ),
    "gpt-oss-20b": dict(_GPT_OSS, num_layers=24, num_experts=32),
    "gpt-oss-120b": dict(_GPT_OSS, num_layers=36, num_experts=128),
    # Scout: experts in every block, qk-norm, Llama 3 RoPE scaling (x16 of 8K, one hard cut).
    "llama4-scout-17b-16e": dict(
        _LLAMA4,
        num_experts=16,
        moe_layer_step=1,
        qk_l2_norm=True,
        max_seq_len=10485760,
        rope_scaling="llama3",
        rope_factor=16.0,
        rope_low_freq_factor=1.0,
        rope_high_freq_factor=1.0,
        rope_original_max_len=8192,
    ),
    # Maverick: dense and expert blocks alternate; no qk-norm, no RoPE scaling.
    "llama4-maverick-17b-128e": dict(
        _LLAMA4, num_experts=128, moe_layer_step=2, max_seq_len=1048576
    ),
    # Grok-1: ffn_size(6144, widening 8) = 32768 per expert; 8192-token context.
    "grok-1": dict(
        _GROK,
        hidden_size=6144,
        num_heads=48,
        intermediate_size=32768,
        moe_intermediate_size=32768,
        max_seq_len=8192,
        rope_theta=10000.0,
        tie_embeddings=True,
        embed_multiplier=78.38367176906169,
        output_multiplier=0.5773502691896257,
    ),
    "grok-2": dict(
        _GROK,
        hidden_size=8192,
        num_heads=64,
        intermediate_size=32768,
        moe_intermediate_size=16384,
        max_seq_len=131072,
        rope_theta=208533496.0,
        moe_residual_mlp=True,
        router_logit_softcap=30.0,
        final_logit_softcap=50.0,
        embed_multiplier=90.50966799187809,
        output_multiplier=0.5,
        attn_temperature_len=1024,
    ),
    # 61 blocks, the first 3 dense; the multi-token-prediction module (block 61) is not built.
    "deepseek-v3": dict(
        _DEEPSEEK_V3,
        hidden_size=7168,
        num_layers=61,
        num_heads=128,
        num_kv_heads=128,
        intermediate_size=18432,
        moe_intermediate_size=2048,
        num_experts=256,
        q_lora_rank=1536,
    ),
}

# Total parameter counts (embeddings included) of the published checkpoints, as Hugging Face
# transformers counts them for the same architecture.
PUBLISHED_PARAMS: dict[str, int] = {
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3.1-8b": 8_030_261_248,
    "llama3.1-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
    "llama3.2-1b": 1_235_814_400,
    "llama3.2-3b": 3_212_749_824,
    "llama3.3-70b": 70_553_706_496,
    "qwen2.5-3b": 3_085_938_688,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-14b": 14_770_033_664,
    "qwen2.5-32b": 32_763_876_352,
    "qwen2.5-72b": 72_706_203_648,
    "qwen3-0.6b": 596_049_920,
    "qwen3-4b": 4_022_468_096,
    "qwen3-8b": 8_190_735_360,
    "qwen3-14b": 14_768_307_200,
    "qwen3-32b": 32_762_123_264,
    "mistral-7b": 7_241_732_096,
    # Mixtures of experts: all experts counted (`num_active_params` counts the top-k only).
    "mixtral-8x7b": 46_702_792_704,
    "mixtral-8x22b": 140_630_071_296,
    "qwen3-30b-a3b": 30_532_122_624,
    "qwen3-235b-a22b": 235_093_634_560,
    "deepseek-v2-lite": 15_706_484_224,
    "deepseek-v2": 235_741_434_880,
    "deepseek-v3": 671_026_404_352,  # the multi-token-prediction module not counted
    "gpt-oss-20b": 20_914_757_184,
    "gpt-oss-120b": 116_829_156_672,
    # Text models only: Meta's 109B / 400B also count the vision encoder.
    "llama4-scout-17b-16e": 107_769_861_120,
    "llama4-maverick-17b-128e": 400_711_848_960,
    # No Grok in transformers: the count of the parameters xai-org/grok-1's model.py creates
    # (tests/test_grok_parity.py), which xAI rounds to 314B; Grok-2's config.json gives 270B.
    "grok-1": 315_684_820_992,
    "grok-2": 269_515_497_472,
}
PRESETS.update(SSM_PRESETS)
PUBLISHED_PARAMS.update(SSM_PUBLISHED_PARAMS)


def preset_names() -> list[str]:
    """Every registered architecture name."""
    return sorted(PRESETS)


def model_spec(name: str, **overrides) -> ModelSpec:
    """The frozen spec of a named preset, with field overrides."""
    if name not in PRESETS:
        raise ConfigError(
            f"model preset {name!r} does not exist; known presets: {', '.join(preset_names())}."
        )
    spec = ModelSpec(**{**PRESETS[name], **overrides})
    spec.validate()
    return spec


def model_config(name: str, **overrides) -> ConfigDict:
    """`config.model` for a preset: the preset name plus every ModelSpec field."""
    spec = model_spec(name, **overrides)
    cfg = ConfigDict({"preset": name, **dataclasses.asdict(spec)})
    return cfg
