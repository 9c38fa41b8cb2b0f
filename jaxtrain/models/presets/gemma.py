"""Gemma 1, 2 and 3 (text): what each generation shares, the published sizes and a two-layer
debug size per generation; `jaxtrain.models.presets.registry` registers them with the rest.

Values are those of each model's Hugging Face `config.json` (google/gemma-2b ... gemma-3-27b-pt;
for the multimodal Gemma 3 sizes, their `text_config`). What every Gemma shares: GeGLU MLPs
(tanh GELU), RMSNorms that scale by 1 + weight, embeddings scaled by sqrt(hidden_size) and tied
to the output. Gemma 2 adds norms on the attention and MLP outputs, sliding-window blocks
alternating with global ones, soft-capped attention scores (50) and logits (30), and a query
scale of query_pre_attn_scalar^-0.5. Gemma 3 drops the soft-caps for qk-norm, has five sliding
blocks per global one, and a separate rotary base (10k, unscaled) for the sliding blocks.
"""

from __future__ import annotations

import math

GEMMA = dict(
    family="gemma",
    vocab_size=256000,
    norm_eps=1e-6,
    rope_theta=10000.0,
    max_seq_len=8192,
    head_dim=256,
    tie_embeddings=True,
    mlp_activation="geglu",
    norm_zero_centered=True,
)
GEMMA2 = dict(
    GEMMA,
    family="gemma2",
    post_norms=True,
    sliding_window=4096,
    global_layer_step=2,
    attn_logit_softcap=50.0,
    final_logit_softcap=30.0,
    query_pre_attn_scalar=256.0,
)
GEMMA3 = dict(
    GEMMA,
    family="gemma3",
    vocab_size=262208,
    max_seq_len=131072,
    post_norms=True,
    qk_norm=True,
    sliding_window=1024,
    global_layer_step=6,
    query_pre_attn_scalar=256.0,
    rope_theta=1_000_000.0,
    rope_local_theta=10_000.0,
    rope_scaling="linear",
    rope_factor=8.0,
)


def _sized(shared: dict, hidden: int, **sizes) -> dict:
    """A preset of `shared` values at width `hidden`, embeddings scaled by sqrt(hidden)."""
    return dict(shared, hidden_size=hidden, embed_multiplier=math.sqrt(hidden), **sizes)


GEMMA_PRESETS: dict[str, dict] = {
    "gemma-2b": _sized(
        GEMMA, 2048, num_layers=18, num_heads=8, num_kv_heads=1, intermediate_size=16384
    ),
    "gemma-7b": _sized(
        GEMMA, 3072, num_layers=28, num_heads=16, num_kv_heads=16, intermediate_size=24576
    ),
    "gemma2-2b": _sized(
        GEMMA2, 2304, num_layers=26, num_heads=8, num_kv_heads=4, intermediate_size=9216
    ),
    "gemma2-9b": _sized(
        GEMMA2, 3584, num_layers=42, num_heads=16, num_kv_heads=8, intermediate_size=14336
    ),
    # 27B: 128-wide heads, queries scaled by (hidden / heads)^-0.5 = 144^-0.5.
    "gemma2-27b": _sized(
        GEMMA2,
        4608,
        num_layers=46,
        num_heads=32,
        num_kv_heads=16,
        head_dim=128,
        intermediate_size=36864,
        query_pre_attn_scalar=144.0,
    ),
    # 1B: text only, 32K context without rope scaling, a 512-token window.
    "gemma3-1b": _sized(
        GEMMA3,
        1152,
        vocab_size=262144,
        num_layers=26,
        num_heads=4,
        num_kv_heads=1,
        intermediate_size=6912,
        sliding_window=512,
        max_seq_len=32768,
        rope_scaling="none",
        rope_factor=1.0,
    ),
    "gemma3-4b": _sized(
        GEMMA3, 2560, num_layers=34, num_heads=8, num_kv_heads=4, intermediate_size=10240
    ),
    "gemma3-12b": _sized(
        GEMMA3, 3840, num_layers=48, num_heads=16, num_kv_heads=8, intermediate_size=15360
    ),
    "gemma3-27b": _sized(
        GEMMA3,
        5376,
        num_layers=62,
        num_heads=32,
        num_kv_heads=16,
        head_dim=128,
        intermediate_size=21504,
        query_pre_attn_scalar=168.0,
    ),
}

_DEBUG = dict(
    vocab_size=512,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    max_seq_len=512,
    embed_multiplier=8.0,
)
# Two layers, one sliding and one global, with windows shorter than a test's sequence.
GEMMA_DEBUG_PRESETS: dict[str, dict] = {
    "gemma-debug": dict(GEMMA, **_DEBUG),
    "gemma2-debug": dict(GEMMA2, **_DEBUG, sliding_window=8, query_pre_attn_scalar=24.0),
    "gemma3-debug": dict(
        GEMMA3,
        **_DEBUG,
        sliding_window=8,
        global_layer_step=2,
        query_pre_attn_scalar=24.0,
        rope_factor=4.0,
    ),
}

# Published totals of the text models, as transformers counts them (embeddings once: tied).
# Gemma 3's 4B / 12B / 27B also ship a 417M vision encoder, not counted here.
GEMMA_PUBLISHED_PARAMS: dict[str, int] = {
    "gemma-2b": 2_506_172_416,
    "gemma-7b": 8_537_680_896,
    "gemma2-2b": 2_614_341_888,
    "gemma2-9b": 9_241_705_984,
    "gemma2-27b": 27_227_128_320,
    "gemma3-1b": 999_885_952,
    "gemma3-4b": 3_880_263_168,
    "gemma3-12b": 11_766_034_176,
    "gemma3-27b": 27_009_346_304,
}
