"""Named architectures with their published hyperparameters, plus a tiny debug size per family.

The values a family's sizes share live in `preset_families`, the debug sizes in
`presets_debug`, the state-space and hybrid families in `presets_ssm`, Gemma's, OLMo 3's,
GPT-3's and Qwen3-Next's / Qwen3.5's in `gemma`, `olmo3`, `gpt3` and `qwen3_next`; this module
registers them all under one table.

Full-size values are those of each model's Hugging Face `config.json`. `model_config(name)`
returns a ConfigDict of every `ModelSpec` field, ready to sit in `config.model` and be overridden
key by key (`--config.model.num_layers=2`).
"""

from __future__ import annotations

import dataclasses

from ml_collections import ConfigDict

from jaxtrain.errors import ConfigError
from jaxtrain.models.presets import families as family
from jaxtrain.models.presets.debug import DEBUG_PRESETS
from jaxtrain.models.presets.gemma import (
    GEMMA_DEBUG_PRESETS,
    GEMMA_PRESETS,
    GEMMA_PUBLISHED_PARAMS,
)
from jaxtrain.models.presets.gpt3 import GPT3_PRESETS, GPT3_PUBLISHED_PARAMS
from jaxtrain.models.presets.olmo3 import OLMO3_PRESETS, OLMO3_PUBLISHED_PARAMS
from jaxtrain.models.presets.qwen3_next import QWEN3_NEXT_PRESETS, QWEN3_NEXT_PUBLISHED_PARAMS
from jaxtrain.models.presets.ssm import SSM_PRESETS, SSM_PUBLISHED_PARAMS
from jaxtrain.models.spec.hyperparameters import ModelSpec

PRESETS: dict[str, dict] = {
    **DEBUG_PRESETS,
    "llama2-7b": dict(
        family.LLAMA2,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        intermediate_size=11008,
    ),
    "llama2-13b": dict(
        family.LLAMA2,
        hidden_size=5120,
        num_layers=40,
        num_heads=40,
        num_kv_heads=40,
        intermediate_size=13824,
    ),
    "llama2-70b": dict(
        family.LLAMA2,
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        intermediate_size=28672,
    ),
    "llama3-8b": dict(
        family.LLAMA3,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=14336,
    ),
    "llama3-70b": dict(
        family.LLAMA3,
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        intermediate_size=28672,
    ),
    "llama3.1-8b": dict(
        family.LLAMA31,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=14336,
    ),
    "llama3.1-70b": dict(
        family.LLAMA31,
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        intermediate_size=28672,
    ),
    "llama3.1-405b": dict(
        family.LLAMA31,
        hidden_size=16384,
        num_layers=126,
        num_heads=128,
        num_kv_heads=8,
        intermediate_size=53248,
    ),
    "llama3.2-1b": dict(
        family.LLAMA32,
        hidden_size=2048,
        num_layers=16,
        num_heads=32,
        num_kv_heads=8,
        head_dim=64,
        intermediate_size=8192,
    ),
    "llama3.2-3b": dict(
        family.LLAMA32,
        hidden_size=3072,
        num_layers=28,
        num_heads=24,
        num_kv_heads=8,
        intermediate_size=8192,
    ),
    "llama3.3-70b": dict(
        family.LLAMA31,
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        intermediate_size=28672,
    ),
    # The 3B keeps the smaller vocabulary padding, a 32K context and tied embeddings.
    "qwen2.5-3b": dict(
        family.QWEN25,
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
        family.QWEN25,
        hidden_size=3584,
        num_layers=28,
        num_heads=28,
        num_kv_heads=4,
        intermediate_size=18944,
    ),
    "qwen2.5-14b": dict(
        family.QWEN25,
        norm_eps=1e-5,
        hidden_size=5120,
        num_layers=48,
        num_heads=40,
        num_kv_heads=8,
        intermediate_size=13824,
    ),
    "qwen2.5-32b": dict(
        family.QWEN25,
        norm_eps=1e-5,
        hidden_size=5120,
        num_layers=64,
        num_heads=40,
        num_kv_heads=8,
        intermediate_size=27648,
    ),
    "qwen2.5-72b": dict(
        family.QWEN25,
        norm_eps=1e-5,
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        intermediate_size=29568,
    ),
    "qwen3-0.6b": dict(
        family.QWEN3,
        tie_embeddings=True,
        hidden_size=1024,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        intermediate_size=3072,
    ),
    "qwen3-1.7b": dict(
        family.QWEN3,
        tie_embeddings=True,
        hidden_size=2048,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        intermediate_size=6144,
    ),
    "qwen3-4b": dict(
        family.QWEN3,
        tie_embeddings=True,
        hidden_size=2560,
        num_layers=36,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=9728,
    ),
    "qwen3-8b": dict(
        family.QWEN3,
        hidden_size=4096,
        num_layers=36,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=12288,
    ),
    "qwen3-14b": dict(
        family.QWEN3,
        hidden_size=5120,
        num_layers=40,
        num_heads=40,
        num_kv_heads=8,
        intermediate_size=17408,
    ),
    "qwen3-32b": dict(
        family.QWEN3,
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
        family.MIXTRAL,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=14336,
        moe_intermediate_size=14336,
    ),
    "mixtral-8x22b": dict(
        family.MIXTRAL,
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
        family.QWEN3_MOE,
        hidden_size=2048,
        num_layers=48,
        num_heads=32,
        num_kv_heads=4,
        intermediate_size=6144,
        moe_intermediate_size=768,
    ),
    "qwen3-235b-a22b": dict(
        family.QWEN3_MOE,
        hidden_size=4096,
        num_layers=94,
        num_heads=64,
        num_kv_heads=4,
        intermediate_size=12288,
        moe_intermediate_size=1536,
    ),
    # DeepSeek-V2-Lite: no query compression, plain top-6 of 64 experts.
    "deepseek-v2-lite": dict(
        family.DEEPSEEK_V2,
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
        family.DEEPSEEK_V2,
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
    "gpt-oss-20b": dict(family.GPT_OSS, num_layers=24, num_experts=32),
    "gpt-oss-120b": dict(family.GPT_OSS, num_layers=36, num_experts=128),
    # Scout: experts in every block, qk-norm, Llama 3 RoPE scaling (x16 of 8K, one hard cut).
    "llama4-scout-17b-16e": dict(
        family.LLAMA4,
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
        family.LLAMA4, num_experts=128, moe_layer_step=2, max_seq_len=1048576
    ),
    # Grok-1: ffn_size(6144, widening 8) = 32768 per expert; 8192-token context.
    "grok-1": dict(
        family.GROK,
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
        family.GROK,
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
        family.DEEPSEEK_V3,
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
PRESETS.update({**GEMMA_PRESETS, **GEMMA_DEBUG_PRESETS})
PUBLISHED_PARAMS.update(GEMMA_PUBLISHED_PARAMS)
PRESETS.update({**OLMO3_PRESETS, **GPT3_PRESETS})
PUBLISHED_PARAMS.update({**OLMO3_PUBLISHED_PARAMS, **GPT3_PUBLISHED_PARAMS})
PRESETS.update(QWEN3_NEXT_PRESETS)
PUBLISHED_PARAMS.update(QWEN3_NEXT_PUBLISHED_PARAMS)


def family_names() -> tuple[str, ...]:
    """The families the zoo builds (`ModelSpec.family`), in the registry's order: a family is
    in the zoo once it has a preset."""
    return tuple(dict.fromkeys(values["family"] for values in PRESETS.values()))


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
