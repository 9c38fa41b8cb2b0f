"""The checks a `ModelSpec` passes before any model code runs, and the values its choice
fields allow.

Each check raises ConfigError naming the `model.*` key whose value cannot work and what would.
`ModelSpec.validate` runs them. The range of each number on its own (sizes positive, rates
non-negative, ...) is `ranges.MODEL_RANGES`, checked first; what follows here are the relations
between fields and the sizes a feature needs once it is on. `spec` is a ModelSpec; this module
reads only its fields and imports no model module that imports `spec`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.models.spec import block_pattern as blocks
from jaxtrain.models.spec.ranges import check_model_ranges

DTYPES = ("float32", "bfloat16", "float16")
ROPE_SCALINGS = ("none", "llama3", "linear", "yarn")
# Training-time attention: blockwise (hand-written backward, no stored [L, L] probabilities),
# dot (plain softmax(q k^T) v under autodiff), cudnn (jax.nn.dot_product_attention through
# cuDNN's fused kernel; NVIDIA GPUs), auto (cudnn where it applies, else blockwise).
ATTENTION_IMPLS = ("auto", "blockwise", "dot", "cudnn")
REMAT_POLICIES = ("none", "full", "dots", "dots_with_no_batch_dims", "minimal")
# Mixtral, gpt-oss | Qwen-MoE, DeepSeek V2 | DeepSeek V3 | Llama 4 (sigmoid of the top-k logits)
MOE_SCORES = ("topk_softmax", "softmax_topk", "sigmoid", "topk_sigmoid")
# Expert activation: silu(gate) x up, or gpt-oss's clamped variant (see `moe.clamped_swiglu`).
MOE_ACTIVATIONS = ("swiglu", "clamped_swiglu", "geglu", "relu2")
# Dense MLP activation: silu(gate) x up, tanh-approximated gelu(gate) x up (Grok), the
# ungated relu(x)^2 of Nemotron-H's hybrid MLP sublayers, or GPT-3's ungated tanh gelu(x).
MLP_ACTIVATIONS = ("swiglu", "geglu", "relu2", "gelu")
# RMSNorm, or LayerNorm with a bias (GPT-3).
NORM_TYPES = ("rms", "layer")
# How top-k is restricted to groups of experts: none | V2 (group score = its best expert) | V3
# (group score = sum of its two best biased scores).
MOE_TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")
# Low-precision matmuls (`jaxtrain.models.layers.fp8`) and their per-tensor scaling recipes.
QUANTIZATIONS = ("", "fp8")
FP8_RECIPES = ("delayed", "current")
FP8_FORMATS = ("hybrid", "e4m3")  # e4m3 forward + e5m2 gradients | e4m3 for both
FP8_AMAX_ALGOS = ("max", "most_recent")
# Recipes other stacks offer that scale per block or per row: what each would need.
_UNSUPPORTED_SCALING = {
    "mxfp8": "MXFP8 scales every 32 values by a shared power of two; jax.nn.scaled_matmul runs it "
    "only through cuDNN on NVIDIA Blackwell, and jaxtrain has no block-scaled path",
    "blockwise": "block-wise (1x128 / 128x128) scaling is not implemented",
    "rowwise": "row-wise scaling is not implemented",
    "nvfp4": "FP4 training is not implemented",
    "mxfp4": "FP4 training is not implemented",
    "fp4": "FP4 training is not implemented",
    "int8": "int8 training is not implemented",
    "fp8_full": "static (fixed) fp8 scales are not implemented",
}


def validate(spec: Any) -> None:
    """Raises ConfigError naming the first `model.*` key whose value cannot work."""
    check_model_ranges(spec)
    if spec.num_heads % spec.num_kv_heads:
        raise ConfigError(
            f"model.num_heads={spec.num_heads} is not divisible by model.num_kv_heads="
            f"{spec.num_kv_heads}: grouped-query attention shares each kv head among a whole "
            "number of query heads; pick num_kv_heads among the divisors of num_heads."
        )
    if spec.head_dim % 2:
        raise ConfigError(f"model.head_dim={spec.head_dim} must be even for rotary embeddings.")
    if spec.rope_dim % 2 and not spec.mla:
        raise ConfigError(
            f"model.partial_rotary_factor={spec.partial_rotary_factor} rotates "
            f"{spec.rope_dim} of model.head_dim={spec.head_dim} dims, an odd number; rotary "
            "embeddings turn pairs of dims: pick a factor that gives an even width."
        )
    if spec.moe_shared_gate and not (spec.num_experts and spec.moe_shared_experts):
        raise ConfigError(
            "model.moe_shared_gate=True gates the shared experts; set model.num_experts and "
            "model.moe_shared_experts > 0, or turn it off."
        )
    for key, allowed in (
        ("dtype", DTYPES),
        ("param_dtype", DTYPES),
        ("rope_scaling", ROPE_SCALINGS),
        ("remat", REMAT_POLICIES),
    ):
        if getattr(spec, key) not in allowed:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} is not one of {sorted(allowed)}."
            )
    if spec.attention_impl not in ATTENTION_IMPLS:
        raise ConfigError(
            f"model.attention_impl={spec.attention_impl!r} is not one of {list(ATTENTION_IMPLS)}."
        )
    _check_grok(spec)
    _check_norms_and_positions(spec)
    _check_fp8(spec)
    _check_mla(spec)
    _check_layer_pattern(spec)
    _check_blocks(spec)
    _check_linear(spec)
    if spec.num_experts:
        _check_moe(spec)
        return
    expert_only = {
        "num_dense_layers": spec.num_dense_layers,
        "moe_layer_step": spec.moe_layer_step != 1,
        "moe_router_bias": spec.moe_router_bias,
        "moe_expert_bias": spec.moe_expert_bias,
        "moe_weight_inputs": spec.moe_weight_inputs,
        "moe_activation": spec.moe_activation != "swiglu",
        "router_logit_softcap": spec.router_logit_softcap,
        "moe_residual_mlp": spec.moe_residual_mlp,
    }
    for key, used in expert_only.items():
        if used:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} only applies to a mixture"
                " of experts; set it to its default or set model.num_experts "
                "> 0."
            )


def _check_grok(spec: Any) -> None:
    """Soft-caps, multipliers and the dense MLP activation (Grok's switches)."""
    if spec.mlp_activation not in MLP_ACTIVATIONS:
        raise ConfigError(
            f"model.mlp_activation={spec.mlp_activation!r} is not one of {list(MLP_ACTIVATIONS)}."
        )
    if spec.attention_impl == "cudnn" and spec.attn_logit_softcap:
        raise ConfigError(
            f"model.attention_impl='cudnn' cannot soft-cap attention scores "
            f"(model.attn_logit_softcap={spec.attn_logit_softcap}); use "
            "'blockwise', 'dot' or 'auto'."
        )


def _check_norms_and_positions(spec: Any) -> None:
    """OLMo's and GPT-3's switches: where the norms sit and what kind they are, the ungated
    GELU MLP, learned absolute positions."""
    if spec.norm_type not in NORM_TYPES:
        raise ConfigError(f"model.norm_type={spec.norm_type!r} is not one of {list(NORM_TYPES)}.")
    if not (spec.pre_norms or spec.post_norms):
        raise ConfigError(
            "model.pre_norms=False leaves the blocks without norms; set model.post_norms=True "
            "to norm the attention and MLP outputs instead (OLMo 2/3), or pre_norms=True."
        )
    if spec.qk_norm_across_heads and not spec.qk_norm:
        raise ConfigError(
            "model.qk_norm_across_heads=True says how qk-norm normalizes; set "
            "model.qk_norm=True too, or turn it off."
        )
    if spec.learned_positions and spec.learned_positions < spec.max_seq_len:
        raise ConfigError(
            f"model.learned_positions={spec.learned_positions} has no row for positions up to "
            f"model.max_seq_len={spec.max_seq_len}; raise it to at least max_seq_len, or "
            "lower max_seq_len (train.seq_len with it)."
        )
    rotary = {
        "rope_scaling": spec.rope_scaling != "none",
        "rope_local_theta": spec.rope_local_theta,
        "nope_global": spec.nope_global,
        "rope_interleave": spec.rope_interleave,
    }
    for key, used in rotary.items():
        if spec.learned_positions and used:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} shapes rotary embeddings, which "
                f"model.learned_positions={spec.learned_positions} replaces; leave it at its "
                "default or set learned_positions to 0."
            )
    transformer_only = {
        "norm_type": spec.norm_type != "rms",
        "pre_norms": not spec.pre_norms,
        "qk_norm_across_heads": spec.qk_norm_across_heads,
        "learned_positions": spec.learned_positions,
        "mlp_activation": spec.mlp_activation == "gelu",
    }
    for key, used in transformer_only.items():
        if used and (spec.block_pattern or spec.mla or spec.num_experts):
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} applies to dense transformer blocks only; "
                "leave it at its default with model.block_pattern, kv_lora_rank or num_experts."
            )


def _check_blocks(spec: Any) -> None:
    """The hybrid pattern and the state-space keys."""
    if not spec.block_pattern:
        for key, hybrid_only in (("mlp_activation", "relu2"), ("use_rope", False)):
            if getattr(spec, key) == hybrid_only:
                raise ConfigError(
                    f"model.{key}={getattr(spec, key)!r} only applies to "
                    "hybrid stacks; set model.block_pattern or change it."
                )
        return
    try:
        kinds = blocks.pattern_kinds(spec.block_pattern)
    except ValueError as e:
        raise ConfigError(f"model.block_pattern={spec.block_pattern!r}: {e}.") from None
    if len(spec.block_pattern) != spec.num_layers:
        raise ConfigError(
            f"model.block_pattern={spec.block_pattern!r} has "
            f"{len(spec.block_pattern)} sublayers but model.num_layers="
            f"{spec.num_layers}; set num_layers to the pattern's length."
        )
    if "moe" in kinds and not spec.num_experts:
        raise ConfigError(
            f"model.block_pattern={spec.block_pattern!r} has E sublayers; "
            "set model.num_experts > 0 (and moe_intermediate_size)."
        )
    if spec.num_experts and "moe" not in kinds:
        raise ConfigError(
            f"model.num_experts={spec.num_experts} but model.block_pattern="
            f"{spec.block_pattern!r} has no E sublayer; add one or set "
            "num_experts=0."
        )
    unsupported = {
        "num_dense_layers": spec.num_dense_layers,
        "moe_layer_step": spec.moe_layer_step != 1,
        "global_layer_step": spec.global_layer_step,
    }
    for key, used in unsupported.items():
        if used:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} is not supported with "
                "model.block_pattern (hybrid stacks); leave it at its "
                "default."
            )
    delta = sorted({ch for ch in spec.block_pattern if ch in "GK"})
    if delta and not spec.linear_num_key_heads:
        raise ConfigError(
            f"model.block_pattern={spec.block_pattern!r} has {' and '.join(delta)} "
            "(gated delta net / Kimi delta attention) sublayers but "
            "model.linear_num_key_heads=0; set the model.linear_* sizes."
        )
    if spec.mamba_version == 2 and "mamba" in kinds:
        heads = blocks.ssm_heads(spec)
        if not spec.ssm_num_heads and (spec.ssm_expand * spec.hidden_size % spec.ssm_head_dim):
            raise ConfigError(
                f"model.ssm_expand x hidden_size = "
                f"{spec.ssm_expand * spec.hidden_size} is not divisible by "
                f"model.ssm_head_dim={spec.ssm_head_dim}; set "
                "model.ssm_num_heads or another head width."
            )
        if heads % spec.ssm_n_groups:
            raise ConfigError(
                f"model.ssm_n_groups={spec.ssm_n_groups} must divide the "
                f"{heads} Mamba-2 heads (model.ssm_num_heads)."
            )


def _check_linear(spec: Any) -> None:
    """The delta-rule mixer keys, when linear_num_key_heads > 0 turns them on."""
    if not spec.linear_num_key_heads:
        return
    # The head widths and the conv are positive in any case (their ranges); value heads only
    # once key heads turn these blocks on.
    if spec.linear_num_value_heads <= 0:
        raise ConfigError(
            f"model.linear_num_value_heads={spec.linear_num_value_heads} must be a positive "
            "integer for Gated DeltaNet / Kimi delta attention blocks."
        )
    if spec.linear_num_value_heads % spec.linear_num_key_heads:
        raise ConfigError(
            f"model.linear_num_value_heads={spec.linear_num_value_heads} is not a multiple "
            f"of model.linear_num_key_heads={spec.linear_num_key_heads}: each query/key head "
            "serves a whole number of value heads."
        )


def _check_fp8(spec: Any) -> None:
    """The quantization keys: a known recipe, and no fp8 key set while fp8 is off."""
    for key, allowed in (
        ("quantization", QUANTIZATIONS),
        ("fp8_recipe", FP8_RECIPES),
        ("fp8_format", FP8_FORMATS),
        ("fp8_amax_algo", FP8_AMAX_ALGOS),
    ):
        value = getattr(spec, key)
        if value in allowed:
            continue
        why = _UNSUPPORTED_SCALING.get(str(value).lower())
        if why:
            raise ConfigError(
                f"model.{key}={value!r} is not supported: {why}. Use "
                "model.quantization='fp8' with model.fp8_recipe='delayed' or "
                "'current' (per-tensor scaling), or '' for model.dtype "
                "matmuls."
            )
        raise ConfigError(f"model.{key}={value!r} is not one of {list(allowed)}.")
    if spec.quantization:
        return
    defaults = {f.name: f.default for f in dataclasses.fields(spec)}
    for key in (
        "fp8_recipe",
        "fp8_format",
        "fp8_amax_history",
        "fp8_amax_algo",
        "fp8_margin",
        "fp8_output_layer",
        "fp8_experts",
        "fp8_stats",
    ):
        if getattr(spec, key) != defaults[key]:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} only applies to fp8 "
                "matmuls; set model.quantization='fp8' or leave it at its "
                "default."
            )


def _check_layer_pattern(spec: Any) -> None:
    """Local / global attention layers, chunks, NoPE and attention temperature keys."""
    if spec.attention_chunk and spec.sliding_window:
        raise ConfigError(
            f"model.attention_chunk={spec.attention_chunk} and model."
            f"sliding_window={spec.sliding_window} are both set; local layers "
            "use one of them, so set the other to 0."
        )
    if spec.leading_global_layers >= spec.num_layers:
        raise ConfigError(
            f"model.leading_global_layers={spec.leading_global_layers} must be "
            f"between 0 and model.num_layers - 1 = {spec.num_layers - 1}: at "
            "least one block keeps the sliding window (set the window to 0 "
            "for global attention everywhere)."
        )
    if spec.leading_global_layers and not (spec.sliding_window or spec.attention_chunk):
        raise ConfigError(
            f"model.leading_global_layers={spec.leading_global_layers} needs "
            "local layers to follow: set model.sliding_window (or "
            "attention_chunk), or set it to 0."
        )
    if spec.global_layer_step == 1:
        raise ConfigError(
            "model.global_layer_step=1 makes every layer global; set it to 0 "
            "and model.sliding_window / attention_chunk to 0 instead."
        )
    if spec.nope_global and not spec.global_layer_step:
        raise ConfigError(
            "model.nope_global=True needs global layers: set "
            "model.global_layer_step > 1 (Llama 4: 4)."
        )
    if spec.attn_temperature_tuning and not spec.nope_global:
        raise ConfigError(
            "model.attn_temperature_tuning=True applies to NoPE layers only; "
            "set model.nope_global=True (and global_layer_step) or turn it off."
        )
    if spec.rope_local_theta and not (spec.sliding_window and spec.global_layer_step):
        raise ConfigError(
            f"model.rope_local_theta={spec.rope_local_theta} is the rotary base of "
            "sliding-window blocks between global ones: set model.sliding_window and "
            "model.global_layer_step (Gemma 3: 6), or set it to 0."
        )
    if spec.rope_local_theta and (spec.block_pattern or spec.rope_interleave):
        raise ConfigError(
            f"model.rope_local_theta={spec.rope_local_theta} applies to transformer blocks "
            "of half-split RoPE only; set it to 0 with model.block_pattern or rope_interleave."
        )
    if spec.mla:
        for key in (
            "rope_local_theta",
            "attention_chunk",
            "global_layer_step",
            "leading_global_layers",
            "attention_sinks",
            "o_bias",
            "qk_l2_norm",
        ):
            if getattr(spec, key):
                raise ConfigError(
                    f"model.{key}={getattr(spec, key)!r} is not supported with"
                    " multi-head latent attention (model.kv_lora_rank > 0); "
                    "set it off."
                )


def _check_mla(spec: Any) -> None:
    """Multi-head latent attention keys: all set consistently, or all left at 0."""
    mla_keys = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    if not spec.mla:
        for key in mla_keys:
            if getattr(spec, key):
                raise ConfigError(
                    f"model.{key}={getattr(spec, key)} only applies to multi-head latent "
                    "attention; set model.kv_lora_rank > 0 to use it, or set it to 0."
                )
        return
    if spec.qk_rope_head_dim <= 0 or spec.qk_rope_head_dim % 2:
        raise ConfigError(
            f"model.qk_rope_head_dim={spec.qk_rope_head_dim} must be a "
            "positive even number with model.kv_lora_rank > 0: every head's "
            "query and the shared key carry that many rotary dims."
        )
    if spec.v_head_dim <= 0:
        raise ConfigError(
            f"model.v_head_dim={spec.v_head_dim} must be a positive integer "
            "with model.kv_lora_rank > 0."
        )
    for key, value in (
        ("qkv_bias", spec.qkv_bias),
        ("qk_norm", spec.qk_norm),
        ("sliding_window", spec.sliding_window),
    ):
        if value:
            raise ConfigError(
                f"model.{key}={value} is not supported with multi-head latent "
                "attention (model.kv_lora_rank > 0); set it off."
            )


def _check_moe(spec: Any) -> None:
    """The mixture-of-experts keys, checked only when num_experts > 0."""
    if not 0 < spec.num_experts_per_tok <= spec.num_experts:
        raise ConfigError(
            f"model.num_experts_per_tok={spec.num_experts_per_tok} must be "
            f"between 1 and model.num_experts={spec.num_experts}."
        )
    if spec.moe_intermediate_size <= 0:
        raise ConfigError(
            f"model.moe_intermediate_size={spec.moe_intermediate_size} must "
            "be a positive integer when model.num_experts > 0."
        )
    if spec.moe_score not in MOE_SCORES:
        raise ConfigError(f"model.moe_score={spec.moe_score!r} is not one of {list(MOE_SCORES)}.")
    if spec.num_dense_layers >= spec.num_layers:
        raise ConfigError(
            f"model.num_dense_layers={spec.num_dense_layers} must be between 0 "
            f"and model.num_layers - 1 = {spec.num_layers - 1}: at least one "
            "block keeps its experts."
        )
    if spec.moe_shared_intermediate_size and not spec.moe_shared_experts:
        raise ConfigError(
            f"model.moe_shared_intermediate_size={spec.moe_shared_intermediate_size} "
            "sizes shared experts, but model.moe_shared_experts=0; set it to 1 or leave "
            "the size at 0."
        )
    if spec.moe_activation not in MOE_ACTIVATIONS:
        raise ConfigError(
            f"model.moe_activation={spec.moe_activation!r} is not one of {list(MOE_ACTIVATIONS)}."
        )
    step = spec.moe_layer_step
    if spec.num_layers % step:
        raise ConfigError(
            f"model.moe_layer_step={step} must be a positive divisor of "
            f"model.num_layers={spec.num_layers}: the blocks form whole groups "
            "of step - 1 dense blocks and one expert block."
        )
    if step > 1 and spec.num_dense_layers:
        raise ConfigError(
            f"model.moe_layer_step={step} and model.num_dense_layers="
            f"{spec.num_dense_layers} are both set; use leading dense blocks "
            "or interleaved ones, not both."
        )
    if spec.moe_score == "topk_sigmoid" and (
        spec.moe_score_bias or spec.moe_topk_method != "greedy"
    ):
        raise ConfigError(
            "model.moe_score='topk_sigmoid' ranks raw logits; it takes no "
            "model.moe_score_bias and only moe_topk_method='greedy'."
        )
    if spec.moe_bias_update_rate and not spec.moe_score_bias:
        raise ConfigError(
            f"model.moe_bias_update_rate={spec.moe_bias_update_rate} needs the "
            "expert bias it updates; set model.moe_score_bias=True or the "
            "rate to 0."
        )
    _check_groups(spec)


def _check_groups(spec: Any) -> None:
    """Group-limited top-k: groups split the experts evenly and hold k experts between them."""
    if spec.moe_topk_method not in MOE_TOPK_METHODS:
        raise ConfigError(
            f"model.moe_topk_method={spec.moe_topk_method!r} is not one of "
            f"{list(MOE_TOPK_METHODS)}."
        )
    e, n, g = spec.num_experts, spec.moe_n_group, spec.moe_topk_group
    if e % n:
        raise ConfigError(
            f"model.moe_n_group={n} must divide model.num_experts={e}: groups "
            "hold equal shares of the experts; pick a divisor of num_experts."
        )
    if not 1 <= g <= n:
        raise ConfigError(
            f"model.moe_topk_group={g} must be between 1 and model.moe_n_group"
            f"={n}: a token picks that many groups."
        )
    if spec.moe_topk_method == "greedy" and n != 1:
        raise ConfigError(
            f"model.moe_n_group={n} has no effect with model.moe_topk_method="
            "'greedy'; use 'group_limited_greedy' or 'noaux_tc', or set "
            "moe_n_group=moe_topk_group=1."
        )
    if spec.num_experts_per_tok > g * (e // n):
        raise ConfigError(
            f"model.num_experts_per_tok={spec.num_experts_per_tok} exceeds the "
            f"{g * (e // n)} experts of model.moe_topk_group={g} groups of "
            f"{e // n}; raise moe_topk_group or lower num_experts_per_tok."
        )
    if spec.moe_topk_method == "noaux_tc" and e // n < 2:
        raise ConfigError(
            f"model.moe_n_group={n} leaves {e // n} expert per group, but "
            "moe_topk_method='noaux_tc' ranks groups by their two best experts;"
            " use at most num_experts / 2 groups."
        )
