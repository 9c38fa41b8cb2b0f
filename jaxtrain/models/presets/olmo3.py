"""OLMo 3: the published sizes and a two-layer debug size; `jaxtrain.models.presets.registry`
registers them with the rest.

Values are those of the models' Hugging Face `config.json` (allenai/Olmo-3-1025-7B,
allenai/Olmo-3-1125-32B), as MaxText's olmo3-7b / olmo3-32b model files copy them. OLMo 3 is
OLMo 2's block (RMSNorms on the attention and MLP outputs only, qk-norm over all heads of q
and of k at once, SwiGLU, untied output) with three sliding-window blocks (4096 tokens) per
global one. Its long-context checkpoints scale RoPE with YaRN (factor 8 over 8192 tokens) on
the global blocks only; the sliding blocks rotate by the same base, unscaled.
"""

from __future__ import annotations

OLMO3 = dict(
    family="olmo3",
    vocab_size=100278,
    norm_eps=1e-6,
    head_dim=128,
    max_seq_len=65536,
    tie_embeddings=False,
    pre_norms=False,
    post_norms=True,
    qk_norm=True,
    qk_norm_across_heads=True,
    sliding_window=4096,
    global_layer_step=4,
    rope_theta=500_000.0,
    rope_local_theta=500_000.0,
    rope_scaling="yarn",
    rope_factor=8.0,
    rope_original_max_len=8192,
    rope_beta_fast=32.0,
    rope_beta_slow=1.0,
)

OLMO3_PRESETS: dict[str, dict] = {
    "olmo3-7b": dict(
        OLMO3,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        intermediate_size=11008,
    ),
    "olmo3-32b": dict(
        OLMO3,
        hidden_size=5120,
        num_layers=64,
        num_heads=40,
        num_kv_heads=8,
        intermediate_size=27648,
    ),
    # One sliding block (a window shorter than a test's sequence) and one global block with
    # YaRN over a short original context, so every OLMo 3 part shows in the logits.
    "olmo3-debug": dict(
        OLMO3,
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=128,
        max_seq_len=512,
        sliding_window=8,
        global_layer_step=2,
        rope_theta=10_000.0,
        rope_local_theta=10_000.0,
        rope_factor=4.0,
        rope_original_max_len=64,
    ),
}

# As transformers counts Olmo3ForCausalLM (tests/test_olmo3_parity.py builds it).
OLMO3_PUBLISHED_PARAMS: dict[str, int] = {
    "olmo3-7b": 7_298_011_136,
    "olmo3-32b": 32_233_522_176,
}
