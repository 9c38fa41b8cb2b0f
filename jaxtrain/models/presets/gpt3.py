"""GPT-3 as MaxText's gpt3 decoder block builds it: the published 175B size and a two-layer debug
size; `jaxtrain.models.presets.registry` registers them with the rest.

Each block is GPT-2's: LayerNorm (with a bias) before attention and before the MLP, multi-head
attention with biased q/k/v and output projections and queries scaled by head_dim^-0.5, an
ungated tanh-GELU MLP with biases; learned absolute positions are added to the token
embeddings, a final LayerNorm precedes the output, which is tied to the embedding. Every layer
attends densely: the paper's alternating locally banded sparse layers are in neither MaxText
nor this zoo. The 175B size is the paper's (96 layers of width 12288, 96 heads of 128, a
2048-token context, GPT-2's 50257-token vocabulary); MaxText's gpt3-175b file pads the
vocabulary to 50304 and learns 16384 positions.
"""

from __future__ import annotations

GPT3 = dict(
    family="gpt3",
    vocab_size=50257,
    norm_type="layer",
    norm_eps=1e-5,
    mlp_activation="gelu",
    mlp_bias=True,
    qkv_bias=True,
    o_bias=True,
    tie_embeddings=True,
    learned_positions=2048,
    max_seq_len=2048,
)

GPT3_PRESETS: dict[str, dict] = {
    "gpt3-175b": dict(
        GPT3,
        hidden_size=12288,
        num_layers=96,
        num_heads=96,
        num_kv_heads=96,
        head_dim=128,
        intermediate_size=49152,
    ),
    "gpt3-debug": dict(
        GPT3,
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=4,
        head_dim=16,
        intermediate_size=256,
        learned_positions=512,
        max_seq_len=512,
    ),
}

# The paper's "175B": 174.6B with the paper's vocabulary and context.
GPT3_PUBLISHED_PARAMS: dict[str, int] = {"gpt3-175b": 174_604_259_328}
