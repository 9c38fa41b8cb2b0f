"""Presets of the state-space and hybrid families (Mamba-1, Mamba-2, Nemotron-H-style hybrids,
Zebra-Llama's MLA / Gated DeltaNet / KDA / Mamba-2 hybrids);
`jaxtrain.models.presets.registry` registers them with the rest.

Attention-free models carry placeholder attention sizes (`NO_ATTENTION`, never built), the
values `jaxtrain.interop.hf_ssm` reads for them, so a preset and its Hugging Face export agree.
"""

from __future__ import annotations

from jaxtrain.models.spec.block_pattern import NO_ATTENTION

_DEBUG = dict(
    vocab_size=512,
    hidden_size=64,
    max_seq_len=512,
    norm_eps=1e-5,
    use_rope=False,
    ssm_state_size=16,
    ssm_head_dim=16,
    ssm_expand=2,
    ssm_conv_kernel=4,
    ssm_chunk_size=16,
)
# Mamba-2 as state-spaces/mamba2-* and Megatron's MambaModel publish it: tied embeddings,
# expand 2, head width 64, a 4-wide convolution; Megatron pads the vocabulary to 128s.
_MAMBA2 = dict(
    NO_ATTENTION,
    family="mamba2",
    max_seq_len=4096,
    norm_eps=1e-5,
    use_rope=False,
    tie_embeddings=True,
    ssm_expand=2,
    ssm_head_dim=64,
    ssm_conv_kernel=4,
    ssm_chunk_size=256,
)

# Nemotron-H's sublayer sizes at debug size.
_NEMOTRON_H_DEBUG = dict(
    _DEBUG,
    family="nemotron_h",
    num_layers=4,
    block_pattern="M*M-",
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    ssm_num_heads=8,
    ssm_n_groups=2,
    mlp_activation="relu2",
)
_ZEBRA = dict(
    NO_ATTENTION,
    family="zebra_llama",
    vocab_size=128256,
    max_seq_len=2048,
    norm_eps=1e-6,
    use_rope=False,
    rope_theta=500000.0,
    tie_embeddings=True,
)

SSM_PRESETS: dict[str, dict] = {
    "mamba2-debug": dict(
        _DEBUG,
        **NO_ATTENTION,
        family="mamba2",
        num_layers=2,
        block_pattern="MM",
        ssm_num_heads=8,
        ssm_n_groups=2,
    ),
    "mamba-debug": dict(
        _DEBUG,
        **NO_ATTENTION,
        family="mamba",
        num_layers=2,
        block_pattern="MM",
        mamba_version=1,
        ssm_dt_rank=4,
        ssm_head_dim=64,
        tie_embeddings=True,
    ),
    # Mamba-2, no-RoPE attention and relu2 MLP sublayers in Megatron's pattern string.
    "nemotron-h-debug": _NEMOTRON_H_DEBUG,
    # Nemotron-H with expert sublayers (Nemotron 3's kind): relu2 experts and a relu2 shared
    # expert of its own size, a sigmoid router with score-correction bias and grouped top-k.
    "nemotron-h-moe-debug": dict(
        _NEMOTRON_H_DEBUG,
        num_layers=6,
        block_pattern="ME*EM-",
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        moe_shared_experts=1,
        moe_shared_intermediate_size=48,
        moe_activation="relu2",
        moe_score="sigmoid",
        moe_score_bias=True,
        moe_bias_update_rate=1e-3,
        moe_topk_method="noaux_tc",
        moe_n_group=2,
        moe_topk_group=1,
        moe_routed_scaling=2.5,
    ),
    # Zebra-Llama's block kinds at debug size (Primus' HybridStack: every mixer followed by a
    # SwiGLU MLP): latent attention with RoPE, Gated DeltaNet, Kimi delta attention, Mamba-2.
    "zebra-llama-debug": dict(
        _DEBUG,
        family="zebra_llama",
        num_layers=8,
        block_pattern="*-G-K-M-",
        use_rope=True,
        rope_theta=500000.0,
        num_heads=4,
        num_kv_heads=4,
        head_dim=16,
        intermediate_size=128,
        kv_lora_rank=32,
        q_lora_rank=48,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        ssm_num_heads=8,
        ssm_n_groups=2,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_chunk=8,
        linear_gate_bias=True,
        tie_embeddings=True,
    ),
    # Primus' Zebra-Llama sizes (FLA's gated_deltanet_* / kda_* configs, which its YAMLs match):
    # Llama 3's tokenizer, tied embeddings, (mixer, SwiGLU MLP) pairs.
    "zebra-llama-1b-gdn": dict(
        _ZEBRA,
        hidden_size=2048,
        intermediate_size=8192,
        num_layers=32,
        block_pattern="G-" * 16,
        linear_num_key_heads=8,
        linear_num_value_heads=16,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
    ),
    "zebra-llama-300m-kda": dict(
        _ZEBRA,
        hidden_size=1024,
        intermediate_size=4096,
        num_layers=24,
        block_pattern="K-" * 12,
        linear_num_key_heads=8,
        linear_num_value_heads=8,
        linear_key_head_dim=32,
        linear_value_head_dim=64,
        linear_gate_bias=True,
    ),
    # Three MLA and nine Gated DeltaNet mixers (FLA's attn.layers [0, 4, 8]).
    "zebra-llama-300m-gdn-hybrid": dict(
        _ZEBRA,
        hidden_size=1024,
        intermediate_size=4096,
        num_layers=24,
        block_pattern="*-G-G-G-" * 3,
        use_rope=True,
        num_heads=16,
        num_kv_heads=16,
        head_dim=64,
        q_lora_rank=672,
        kv_lora_rank=64,
        qk_nope_head_dim=32,
        qk_rope_head_dim=32,
        v_head_dim=64,
        rope_interleave=True,
        linear_num_key_heads=4,
        linear_num_value_heads=8,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
    ),
    # Primus / Megatron mamba_370M.yaml: 48 Mamba-2 layers of 1024, state 16, 8 groups, the
    # GPT-NeoX tokenizer's 50277 ids padded to 50304.
    "mamba-370m": dict(
        _MAMBA2,
        vocab_size=50304,
        hidden_size=1024,
        num_layers=48,
        block_pattern="M" * 48,
        ssm_state_size=16,
        ssm_n_groups=8,
        ssm_chunk_size=128,
    ),
    # state-spaces/mamba2-130m and -370m (Mamba2ForCausalLM), vocabulary padded to 16s.
    "mamba2-130m": dict(
        _MAMBA2,
        vocab_size=50288,
        hidden_size=768,
        num_layers=24,
        block_pattern="M" * 24,
        ssm_state_size=128,
        ssm_n_groups=1,
    ),
    "mamba2-370m": dict(
        _MAMBA2,
        vocab_size=50288,
        hidden_size=1024,
        num_layers=48,
        block_pattern="M" * 48,
        ssm_state_size=128,
        ssm_n_groups=1,
    ),
    # state-spaces/mamba-130m-hf (MambaForCausalLM).
    "mamba-130m": dict(
        NO_ATTENTION,
        family="mamba",
        vocab_size=50280,
        hidden_size=768,
        num_layers=24,
        block_pattern="M" * 24,
        mamba_version=1,
        ssm_state_size=16,
        ssm_expand=2,
        ssm_conv_kernel=4,
        norm_eps=1e-5,
        use_rope=False,
        tie_embeddings=True,
        max_seq_len=4096,
    ),
}

# transformers' parameter count of the same architecture (tied embeddings counted once).
SSM_PUBLISHED_PARAMS: dict[str, int] = {
    "mamba-370m": 368_363_008,
    "mamba2-130m": 128_989_632,
    "mamba2-370m": 368_346_624,
    "mamba-130m": 129_135_360,
}
