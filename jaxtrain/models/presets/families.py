"""What the presets of each family share: the published values every size of a family repeats.

`jaxtrain.models.presets.registry` (full sizes) and `jaxtrain.models.presets.debug` (tiny sizes) build on
these dicts, adding each model's sizes.
"""

from __future__ import annotations

# Shared per-family values; each preset adds its sizes.
LLAMA2 = dict(
    family="llama",
    vocab_size=32000,
    norm_eps=1e-5,
    rope_theta=10000.0,
    max_seq_len=4096,
    head_dim=128,
)
LLAMA3 = dict(
    family="llama",
    vocab_size=128256,
    norm_eps=1e-5,
    rope_theta=500000.0,
    max_seq_len=8192,
    head_dim=128,
)
# Llama 3.1 onwards: 128K context through "llama3" RoPE scaling of the 8K-trained frequencies.
LLAMA31 = dict(
    LLAMA3,
    max_seq_len=131072,
    rope_scaling="llama3",
    rope_factor=8.0,
    rope_low_freq_factor=1.0,
    rope_high_freq_factor=4.0,
    rope_original_max_len=8192,
)
LLAMA32 = dict(LLAMA31, rope_factor=32.0, tie_embeddings=True)
QWEN25 = dict(
    family="qwen2",
    vocab_size=152064,
    norm_eps=1e-6,
    rope_theta=1000000.0,
    max_seq_len=131072,
    head_dim=128,
    qkv_bias=True,
)
QWEN3 = dict(
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
MIXTRAL = dict(
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
QWEN3_MOE = dict(
    QWEN3,
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
MLA = dict(
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
DEEPSEEK_V2 = dict(
    MLA,
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
DEEPSEEK_V3 = dict(
    MLA,
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
GPT_OSS = dict(
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
LLAMA4 = dict(
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
GROK = dict(
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
