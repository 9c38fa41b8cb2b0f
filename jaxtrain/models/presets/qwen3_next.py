"""Qwen3-Next and Qwen3.5 (text): the published sizes MaxText's and Primus' model files name, and
two-layer debug sizes; `jaxtrain.models.presets.registry` registers them with the rest.

Values are those of the Hugging Face `config.json` (Qwen/Qwen3-Next-80B-A3B-Instruct, the
`text_config` of Qwen/Qwen3.5-35B-A3B and Qwen/Qwen3.5-397B-A17B), as MaxText's
qwen3-next-80b-a3b / qwen3.5-* and Primus' qwen3_5_35B_A3B files copy them. Each checkpoint
layer is a token mixer and a feed-forward, two sublayers of a hybrid stack: three Gated DeltaNet
layers (`G`) per gated full-attention layer (`*`), each followed by experts (`E`) or, in the
dense Qwen3.5 sizes, a SwiGLU MLP (`-`). Attention has qk-norm, a sigmoid output gate and RoPE
on a quarter of each 256-wide head; every norm is zero-centred (1 + weight); the shared
expert's output is scaled by a sigmoid gate. The multi-token-prediction layers of the published
checkpoints are not built (transformers skips them too).
"""

from __future__ import annotations


def layer_pattern(layers: int, ffn: str, interval: int = 4) -> str:
    """The block pattern of `layers` checkpoint layers: full attention every `interval`-th,
    Gated DeltaNet otherwise, each followed by the feed-forward `ffn` (E or -)."""
    return "".join(("*" if (i + 1) % interval == 0 else "G") + ffn for i in range(layers))


_COMMON = dict(
    norm_eps=1e-6,
    head_dim=256,
    num_kv_heads=2,
    max_seq_len=262144,
    tie_embeddings=False,
    rope_theta=10_000_000.0,
    partial_rotary_factor=0.25,
    qk_norm=True,
    attn_output_gate=True,
    norm_zero_centered=True,
    linear_num_key_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel=4,
)
_EXPERTS = dict(
    moe_score="softmax_topk",
    moe_norm_topk=True,
    moe_shared_experts=1,
    moe_shared_gate=True,
    moe_aux_loss_coef=0.001,  # router_aux_loss_coef x top-k (jaxtrain counts per assignment)
)
QWEN3_NEXT = dict(_COMMON, **_EXPERTS, family="qwen3_next", vocab_size=151936)
QWEN3_5 = dict(_COMMON, family="qwen3_5", vocab_size=248320)
QWEN3_5_MOE = dict(_COMMON, **_EXPERTS, family="qwen3_5_moe", vocab_size=248320)


def _moe(base: dict, layers: int, k: int, **sizes) -> dict:
    return dict(
        base,
        num_layers=2 * layers,
        block_pattern=layer_pattern(layers, "E"),
        num_experts_per_tok=k,
        moe_aux_loss_coef=0.001 * k,
        **sizes,
    )


QWEN3_NEXT_PRESETS: dict[str, dict] = {
    "qwen3-next-80b-a3b": _moe(
        QWEN3_NEXT,
        48,
        10,
        hidden_size=2048,
        num_heads=16,
        intermediate_size=5120,
        num_experts=512,
        moe_intermediate_size=512,
        moe_shared_intermediate_size=512,
        linear_num_value_heads=32,
    ),
    "qwen3.5-35b-a3b": _moe(
        QWEN3_5_MOE,
        40,
        8,
        hidden_size=2048,
        num_heads=16,
        intermediate_size=512,  # no dense layer: the expert size, as MaxText's base_mlp_dim
        num_experts=256,
        moe_intermediate_size=512,
        moe_shared_intermediate_size=512,
        linear_num_value_heads=32,
    ),
    "qwen3.5-397b-a17b": _moe(
        QWEN3_5_MOE,
        60,
        10,
        hidden_size=4096,
        num_heads=32,
        intermediate_size=1024,
        num_experts=512,
        moe_intermediate_size=1024,
        moe_shared_intermediate_size=1024,
        linear_num_value_heads=64,
    ),
}

# Two checkpoint layers (a Gated DeltaNet and a gated attention layer) at test sizes.
_DEBUG = dict(
    vocab_size=512,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    head_dim=16,
    intermediate_size=128,
    max_seq_len=512,
    rope_theta=10_000.0,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
)
_DEBUG_EXPERTS = dict(
    num_experts=4,
    num_experts_per_tok=2,
    moe_aux_loss_coef=0.002,
    moe_intermediate_size=32,
    moe_shared_intermediate_size=48,
)
QWEN3_NEXT_PRESETS.update(
    {
        "qwen3-next-debug": dict(
            QWEN3_NEXT, **_DEBUG, **_DEBUG_EXPERTS, block_pattern=layer_pattern(2, "E", 2)
        ),
        "qwen3.5-debug": dict(QWEN3_5, **_DEBUG, block_pattern=layer_pattern(2, "-", 2)),
        "qwen3.5-moe-debug": dict(
            QWEN3_5_MOE, **_DEBUG, **_DEBUG_EXPERTS, block_pattern=layer_pattern(2, "E", 2)
        ),
    }
)

# As transformers counts Qwen3NextForCausalLM and Qwen3_5MoeForCausalLM (the text model; the
# published 35B and 397B also count the vision encoder and the multi-token-prediction layer).
QWEN3_NEXT_PUBLISHED_PARAMS: dict[str, int] = {
    "qwen3-next-80b-a3b": 79_674_391_296,
    "qwen3.5-35b-a3b": 34_660_610_688,
    "qwen3.5-397b-a17b": 396_346_350_336,
}
