"""Tiny debug sizes of every transformer family, for tests and smoke runs (two layers, dims
<= 64); `jaxtrain.models.presets.registry` registers them with the full sizes.
"""

from __future__ import annotations

from jaxtrain.models.presets import families as family

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

DEBUG_PRESETS: dict[str, dict] = {
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
            for k, v in family.GROK.items()
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
            for k, v in family.GROK.items()
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
}
