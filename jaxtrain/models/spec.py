"""The frozen hyperparameters of a decoder model, checked before any model code runs.

A `ModelSpec` is what model code sees; the ml-collections `config.model` section is turned into
one by `ModelSpec.from_config`, which names the offending key when a value cannot work.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from jaxtrain.errors import ConfigError
from jaxtrain.models import block_pattern as blocks
from jaxtrain.models.layer_pattern import attention_kinds

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
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
# Dense MLP activation: silu(gate) x up, tanh-approximated gelu(gate) x up (Grok), or the
# ungated relu(x)^2 of Nemotron-H's hybrid MLP sublayers.
MLP_ACTIVATIONS = ("swiglu", "geglu", "relu2")
# How top-k is restricted to groups of experts: none | V2 (group score = its best expert) | V3
# (group score = sum of its two best biased scores).
MOE_TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")
# Low-precision matmuls (`jaxtrain.models.fp8`) and their per-tensor scaling recipes.
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


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Hyperparameters of one decoder (Llama 2/3, Qwen 2.5/3, Mistral; Mixtral, Qwen3-MoE,
    DeepSeek V2/V3, gpt-oss and Llama 4 when `num_experts` > 0, which swaps the MLP of every
    block after the first `num_dense_layers` (or of every `moe_layer_step`-th block) for a
    mixture of experts; `kv_lora_rank` > 0 swaps grouped-query attention for multi-head latent
    attention; `global_layer_step` alternates local and global attention layers)."""

    family: str = "llama"  # informational: llama, qwen2, qwen3, mistral, mixtral, deepseek_v3, ...
    vocab_size: int = 32000  # rows of the embedding and output projection
    hidden_size: int = 4096  # model width d
    num_layers: int = 32  # decoder blocks
    num_heads: int = 32  # query heads
    num_kv_heads: int = 32  # key/value heads; < num_heads is grouped-query attention
    head_dim: int = 128  # width of each attention head (even: rotary embeddings)
    intermediate_size: int = 11008  # hidden width of the SwiGLU MLP
    max_seq_len: int = 4096  # longest sequence (training windows, prompt + generated tokens)
    norm_eps: float = 1e-5  # RMSNorm epsilon
    rope_theta: float = 10000.0  # rotary embedding base
    rope_scaling: str = "none"  # none | llama3 | linear | yarn
    rope_factor: float = 1.0  # context extension factor of llama3 / linear / yarn rope_scaling
    rope_low_freq_factor: float = 1.0  # llama3 rope_scaling: low-frequency boundary
    rope_high_freq_factor: float = 4.0  # llama3 rope_scaling: high-frequency boundary
    rope_original_max_len: int = 8192  # llama3 / yarn rope_scaling: pretraining context length
    rope_beta_fast: float = 32.0  # yarn: wavelengths turning more often than this keep their speed
    rope_beta_slow: float = 1.0  # yarn: wavelengths turning less often than this are slowed fully
    rope_mscale: float = 0.0  # yarn: attention-factor numerator; 0 = unset
    rope_mscale_all_dim: float = 0.0  # yarn: its denominator, MLA softmax boost
    rope_truncate: bool = True  # yarn: round the ramp ends to whole dims (gpt-oss: False)
    rope_interleave: bool = False  # rotate pairs (2i, 2i+1), not (i, i+H/2) (DeepSeek, Llama 4)
    tie_embeddings: bool = False  # output projection shares the embedding matrix
    qkv_bias: bool = False  # biases on the q/k/v projections (Qwen 2.5)
    qk_norm: bool = False  # RMSNorm on queries and keys per head (Qwen 3)
    sliding_window: int = 0  # 0: full causal attention
    attention_chunk: int = 0  # > 0: tokens see only earlier tokens of their chunk (Llama 4)
    # Global blocks ignore sliding_window / attention_chunk (gpt-oss: 2, Llama 4: 4).
    global_layer_step: int = 0  # > 0: every this-many-th block is global; 0: all blocks alike
    leading_global_layers: int = 0  # the first this-many blocks are global (max_window_layers)
    nope_global: bool = False  # global blocks skip RoPE (Llama 4's NoPE layers)
    qk_l2_norm: bool = False  # weightless RMS norm of q and k after RoPE, RoPE blocks (Llama 4)
    attn_temperature_tuning: bool = False  # NoPE blocks scale q by log1p(floor((i+1)/floor))
    attn_floor_scale: float = 8192.0  # temperature tuning: positions per step of the log
    attn_scale: float = 0.1  # temperature tuning: q x (1 + attn_scale x log1p(...))
    attention_sinks: bool = False  # a learned per-head logit in each softmax denominator
    o_bias: bool = False  # bias on the attention output projection (gpt-oss)
    mlp_bias: bool = False  # biases on the dense MLP's gate, up and down (Llama's mlp_bias)
    attention_impl: str = "auto"  # auto | blockwise | dot | cudnn: see ATTENTION_IMPLS
    attention_block: int = 0  # blockwise attention: queries per block; 0: by device and length
    init_std: float = 0.02  # standard deviation of the normal weight init
    param_dtype: str = "float32"  # dtype parameters are stored (and optimized) in
    dtype: str = "float32"  # compute dtype
    remat: str = "none"  # recompute activations in backward: one of REMAT_POLICIES
    scan_layers: bool = True  # scan over the stacked blocks; False unrolls (same params)
    # FP8 matmuls (jaxtrain/models/fp8.py, docs/fp8.md): the attention, MLP and expert
    # projections multiply float8 operands with float32 accumulation, per-tensor scaled.
    quantization: str = ""  # "" (matmuls in model.dtype) | fp8 (docs/fp8.md)
    fp8_recipe: str = "delayed"  # fp8 scales from: delayed (amax history) | current (this step)
    fp8_format: str = "hybrid"  # hybrid: e4m3 forward, e5m2 gradients | e4m3: e4m3 for both
    fp8_amax_history: int = 1024  # delayed: steps of amax history each scale looks back over
    fp8_amax_algo: str = "max"  # delayed: amax of a scale: the history's max | most_recent
    fp8_margin: int = 0  # scales leave 2^margin of headroom below the format's largest value
    fp8_output_layer: bool = False  # the output projection in fp8 too (Transformer Engine: no)
    fp8_experts: bool = True  # the routed experts' grouped products in fp8 too
    fp8_stats: bool = False  # per-layer amax and scale of every fp8 tensor as train metrics
    # Multi-head latent attention (DeepSeek V2/V3) when kv_lora_rank > 0: num_kv_heads and
    # head_dim are then unused (presets set num_heads and qk_rope_head_dim, as transformers does).
    kv_lora_rank: int = 0  # width of the compressed key/value latent; 0: grouped-query attention
    q_lora_rank: int = 0  # width of the compressed query latent; 0: one query projection (V2-Lite)
    qk_nope_head_dim: int = 0  # MLA: per-head query/key width without rotary embedding
    qk_rope_head_dim: int = 0  # MLA: rotary query width, and the one rotary key all heads share
    v_head_dim: int = 0  # MLA: per-head value width
    num_experts: int = 0  # 0: dense MLP in every block
    num_experts_per_tok: int = 2  # top-k
    moe_intermediate_size: int = 0  # each expert's hidden size
    moe_score: str = "topk_softmax"  # topk_softmax | softmax_topk | sigmoid | topk_sigmoid
    moe_norm_topk: bool = True  # softmax_topk / sigmoid: kept scores sum to 1
    moe_topk_method: str = "greedy"  # greedy | group_limited_greedy | noaux_tc
    moe_n_group: int = 1  # expert groups; grouped top-k keeps moe_topk_group of them per token
    moe_topk_group: int = 1  # groups a token's experts may come from
    moe_routed_scaling: float = 1.0  # scales routed weights (routed_scaling_factor)
    moe_shared_experts: int = 0  # always-on experts: a SwiGLU of this x moe_intermediate_size
    # The shared experts' hidden size (Nemotron-H's moe_shared_expert_intermediate_size).
    moe_shared_intermediate_size: int = 0  # 0: moe_shared_experts x moe_intermediate_size
    num_dense_layers: int = 0  # leading dense-MLP blocks (first_k_dense_replace)
    moe_score_bias: bool = False  # expert bias for top-k choice only (aux-free)
    moe_bias_update_rate: float = 0.0  # bias += rate * sign(mean load - load) per step
    moe_aux_loss_coef: float = 0.0  # load-balancing loss weight
    moe_z_loss_coef: float = 0.0  # router z-loss weight
    moe_layer_step: int = 1  # every this-many-th block has experts, the rest dense (Llama 4)
    moe_router_bias: bool = False  # bias on the router logits (gpt-oss)
    moe_expert_bias: bool = False  # biases on each expert's gate, up and down (gpt-oss)
    moe_weight_inputs: bool = False  # router weights scale the expert input (Llama 4)
    # An expert keeps its first ceil(factor x tokens x k / experts) assignments of a micro batch,
    # in token order, and drops the rest (static shapes).
    moe_capacity_factor: float = 0.0  # expert capacity over the even share; 0: dropless
    # relu2: ungated relu(x W_up)^2 W_down experts and shared experts (Nemotron-H)
    moe_activation: str = "swiglu"  # swiglu | clamped_swiglu (gpt-oss) | geglu (Grok) | relu2
    moe_swiglu_alpha: float = 1.702  # clamped_swiglu: gate x sigmoid(alpha x gate)
    moe_swiglu_limit: float = 7.0  # clamped_swiglu: gate <= limit, |up| <= limit
    # Grok (xAI's Grok-1 / Grok-2): soft-capped logits (cap x tanh(x / cap); 0: off), norms
    # on the attention and MLP outputs, scaled embeddings and logits, GELU-gated MLPs.
    mlp_activation: str = "swiglu"  # dense MLPs: swiglu | geglu (gelu(gate) x up, Grok) |
    #   relu2 (relu(x)^2, ungated; hybrid MLP sublayers only, Nemotron-H)
    attn_logit_softcap: float = 0.0  # caps scaled q.k scores before the softmax (Grok: 30)
    attn_temperature_len: int = 0  # > 0: queries at index i > this scale by log2(i) / log2(it)
    router_logit_softcap: float = 0.0  # caps the router logits (Grok-2: 30)
    final_logit_softcap: float = 0.0  # caps the output logits (Grok-2: 50)
    post_norms: bool = False  # RMSNorm on the attention and MLP outputs before each residual add
    embed_multiplier: float = 1.0  # scales the token embeddings (Grok-1: 78.38 = sqrt(6144))
    output_multiplier: float = 1.0  # scales the output logits (Grok-1: 1 / sqrt(3))
    moe_residual_mlp: bool = False  # a dense MLP beside the experts, (mlp + moe) / sqrt(2)
    # Hybrid and state-space models (jaxtrain/models/hybrid.py, docs/models.md): one pre-norm
    # residual sublayer per character, M mamba, * attention (MLA with kv_lora_rank), - MLP,
    # E mixture of experts (Megatron's hybrid_override_pattern), G Gated DeltaNet, K Kimi
    # delta attention (sized by linear_*); "" = transformer blocks.
    block_pattern: str = ""  # len == num_layers when set; Mamba-2 LM: "MMMM..."; "*-G-": MLA, GDN
    mamba_version: int = 2  # M sublayers: 2 (Mamba-2, SSD) | 1 (Mamba-1, selective scan)
    ssm_state_size: int = 128  # N: state width per head (Mamba-2) / per channel (Mamba-1)
    ssm_head_dim: int = 64  # Mamba-2 head width P
    ssm_num_heads: int = 0  # Mamba-2 heads; 0: ssm_expand x hidden_size / ssm_head_dim
    ssm_expand: int = 2  # inner width over hidden_size (Mamba-1; Mamba-2 when heads are 0)
    ssm_n_groups: int = 1  # Mamba-2 groups sharing B and C (and the gated norm's groups)
    ssm_conv_kernel: int = 4  # causal depthwise convolution width
    ssm_conv_bias: bool = True  # bias on the convolution
    ssm_proj_bias: bool = False  # biases on the in/out projections
    ssm_chunk_size: int = 128  # tokens per chunk of the chunked scan (a speed knob only)
    ssm_dt_rank: int = 0  # Mamba-1 time-step rank; 0: ceil(hidden_size / 16)
    ssm_dt_min: float = 0.001  # time-step init: log-uniform in [dt_min, dt_max]
    ssm_dt_max: float = 0.1  # time-step init: upper end of the log-uniform range
    ssm_dt_floor: float = 1e-4  # time-step init: smallest step
    ssm_dt_limit_min: float = 0.0  # clamp of the time step (0, 0: none)
    ssm_dt_limit_max: float = 0.0  # 0: no upper clamp
    use_rope: bool = True  # hybrid attention rotates q/k; False: no position encoding
    # Delta-rule token mixers (models/gated_delta.py, models/kda.py), for blocks a hybrid stack
    # makes Gated DeltaNet or Kimi delta attention; linear_num_key_heads = 0: none.
    linear_num_key_heads: int = 0  # query/key heads
    linear_num_value_heads: int = 0  # value heads, a multiple of the key heads (grouped values)
    linear_key_head_dim: int = 128  # query/key width per head
    linear_value_head_dim: int = 128  # value width per head
    linear_conv_kernel: int = 4  # taps of the causal depthwise conv on q, k and v
    linear_short_conv: bool = True  # False: silu(projection) without the conv (FLA's option)
    linear_output_gate: bool = True  # GDN: norm(o) x silu(x W_g); False: norm(o) alone (FLA)
    linear_gate_bias: bool = False  # KDA: bias on the output gate's up projection (FLA: True)
    linear_chunk: int = 0  # tokens per chunk of the chunked delta rule; 0: 64 GDN, 16 KDA

    @property
    def jnp_dtype(self) -> Any:
        return _DTYPES[self.dtype]

    @property
    def jnp_param_dtype(self) -> Any:
        return _DTYPES[self.param_dtype]

    @property
    def mla(self) -> bool:
        """Whether attention is multi-head latent attention (DeepSeek) rather than GQA."""
        return self.kv_lora_rank > 0

    @property
    def rope_dim(self) -> int:
        """Width the rotary tables cover: the whole head, or MLA's rotary part."""
        return self.qk_rope_head_dim if self.mla else self.head_dim

    @property
    def num_moe_layers(self) -> int:
        """Blocks whose MLP is a mixture of experts (those after the leading dense ones, or
        one in every `moe_layer_step`)."""
        if not self.num_experts:
            return 0
        if self.block_pattern:
            return self.block_pattern.count("E")
        return (self.num_layers - self.num_dense_layers) // self.moe_layer_step

    @classmethod
    def from_config(cls, model_cfg: Any) -> ModelSpec:
        """Builds a spec from a `config.model` ConfigDict (or dict), ignoring non-spec keys."""
        values = dict(model_cfg.items()) if hasattr(model_cfg, "items") else dict(model_cfg)
        fields = {f.name for f in dataclasses.fields(cls)}
        spec = cls(**{k: v for k, v in values.items() if k in fields})
        spec.validate()
        return spec

    def validate(self) -> None:
        """Raises ConfigError naming the first `model.*` key whose value cannot work."""
        positive = (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "max_seq_len",
        )
        for key in positive:
            if int(getattr(self, key)) <= 0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be a positive integer.")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"model.num_heads={self.num_heads} is not divisible by model.num_kv_heads="
                f"{self.num_kv_heads}: grouped-query attention shares each kv head among a whole "
                "number of query heads; pick num_kv_heads among the divisors of num_heads."
            )
        if self.head_dim % 2:
            raise ConfigError(f"model.head_dim={self.head_dim} must be even for rotary embeddings.")
        for key, allowed in (
            ("dtype", _DTYPES),
            ("param_dtype", _DTYPES),
            ("rope_scaling", ROPE_SCALINGS),
            ("remat", REMAT_POLICIES),
        ):
            if getattr(self, key) not in allowed:
                raise ConfigError(
                    f"model.{key}={getattr(self, key)!r} is not one of {sorted(allowed)}."
                )
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ConfigError(
                f"model.attention_impl={self.attention_impl!r} is not one of "
                f"{list(ATTENTION_IMPLS)}."
            )
        if self.attention_block < 0:
            raise ConfigError(
                f"model.attention_block={self.attention_block} must be a number "
                "of query positions per block, or 0 to choose by device and "
                "sequence length."
            )
        if self.sliding_window < 0:
            raise ConfigError(
                f"model.sliding_window={self.sliding_window} must be >= 0 "
                "(0 means full causal attention)."
            )
        self._validate_rope()
        self._validate_grok()
        self._validate_fp8()
        self._validate_mla()
        self._validate_layer_pattern()
        self._validate_blocks()
        self._validate_linear()
        if self.num_experts:
            self._validate_moe()
            return
        expert_only = {
            "num_dense_layers": self.num_dense_layers,
            "moe_layer_step": self.moe_layer_step != 1,
            "moe_router_bias": self.moe_router_bias,
            "moe_expert_bias": self.moe_expert_bias,
            "moe_weight_inputs": self.moe_weight_inputs,
            "moe_activation": self.moe_activation != "swiglu",
            "router_logit_softcap": self.router_logit_softcap,
            "moe_residual_mlp": self.moe_residual_mlp,
        }
        for key, used in expert_only.items():
            if used:
                raise ConfigError(
                    f"model.{key}={getattr(self, key)!r} only applies to a mixture"
                    " of experts; set it to its default or set model.num_experts "
                    "> 0."
                )

    def _validate_grok(self) -> None:
        """Soft-caps, multipliers and the dense MLP activation (Grok's switches)."""
        if self.mlp_activation not in MLP_ACTIVATIONS:
            raise ConfigError(
                f"model.mlp_activation={self.mlp_activation!r} is not one of "
                f"{list(MLP_ACTIVATIONS)}."
            )
        for key in (
            "attn_logit_softcap",
            "router_logit_softcap",
            "final_logit_softcap",
            "attn_temperature_len",
        ):
            if getattr(self, key) < 0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be >= 0 (0: off).")
        for key in ("embed_multiplier", "output_multiplier"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be > 0 (1: off).")
        if self.attention_impl == "cudnn" and self.attn_logit_softcap:
            raise ConfigError(
                f"model.attention_impl='cudnn' cannot soft-cap attention scores "
                f"(model.attn_logit_softcap={self.attn_logit_softcap}); use "
                "'blockwise', 'dot' or 'auto'."
            )

    def _validate_blocks(self) -> None:
        """The hybrid pattern and the state-space keys."""
        if not self.block_pattern:
            for key, hybrid_only in (("mlp_activation", "relu2"), ("use_rope", False)):
                if getattr(self, key) == hybrid_only:
                    raise ConfigError(
                        f"model.{key}={getattr(self, key)!r} only applies to "
                        "hybrid stacks; set model.block_pattern or change it."
                    )
            return
        try:
            kinds = blocks.pattern_kinds(self.block_pattern)
        except ValueError as e:
            raise ConfigError(f"model.block_pattern={self.block_pattern!r}: {e}.") from None
        if len(self.block_pattern) != self.num_layers:
            raise ConfigError(
                f"model.block_pattern={self.block_pattern!r} has "
                f"{len(self.block_pattern)} sublayers but model.num_layers="
                f"{self.num_layers}; set num_layers to the pattern's length."
            )
        if "moe" in kinds and not self.num_experts:
            raise ConfigError(
                f"model.block_pattern={self.block_pattern!r} has E sublayers; "
                "set model.num_experts > 0 (and moe_intermediate_size)."
            )
        if self.num_experts and "moe" not in kinds:
            raise ConfigError(
                f"model.num_experts={self.num_experts} but model.block_pattern="
                f"{self.block_pattern!r} has no E sublayer; add one or set "
                "num_experts=0."
            )
        unsupported = {
            "num_dense_layers": self.num_dense_layers,
            "moe_layer_step": self.moe_layer_step != 1,
            "global_layer_step": self.global_layer_step,
        }
        for key, used in unsupported.items():
            if used:
                raise ConfigError(
                    f"model.{key}={getattr(self, key)!r} is not supported with "
                    "model.block_pattern (hybrid stacks); leave it at its "
                    "default."
                )
        delta = sorted({ch for ch in self.block_pattern if ch in "GK"})
        if delta and not self.linear_num_key_heads:
            raise ConfigError(
                f"model.block_pattern={self.block_pattern!r} has {' and '.join(delta)} "
                "(gated delta net / Kimi delta attention) sublayers but "
                "model.linear_num_key_heads=0; set the model.linear_* sizes."
            )
        if self.mamba_version not in (1, 2):
            raise ConfigError(f"model.mamba_version={self.mamba_version} must be 1 or 2.")
        for key in (
            "ssm_state_size",
            "ssm_head_dim",
            "ssm_expand",
            "ssm_n_groups",
            "ssm_conv_kernel",
            "ssm_chunk_size",
        ):
            if getattr(self, key) <= 0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be a positive integer.")
        for key in ("ssm_num_heads", "ssm_dt_rank"):
            if getattr(self, key) < 0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be >= 0 (0: derived).")
        if self.mamba_version == 2 and "mamba" in kinds:
            heads = blocks.ssm_heads(self)
            if not self.ssm_num_heads and (self.ssm_expand * self.hidden_size % self.ssm_head_dim):
                raise ConfigError(
                    f"model.ssm_expand x hidden_size = "
                    f"{self.ssm_expand * self.hidden_size} is not divisible by "
                    f"model.ssm_head_dim={self.ssm_head_dim}; set "
                    "model.ssm_num_heads or another head width."
                )
            if heads % self.ssm_n_groups:
                raise ConfigError(
                    f"model.ssm_n_groups={self.ssm_n_groups} must divide the "
                    f"{heads} Mamba-2 heads (model.ssm_num_heads)."
                )

    def _validate_linear(self) -> None:
        """The delta-rule mixer keys, when linear_num_key_heads > 0 turns them on."""
        if not self.linear_num_key_heads:
            return
        for key in (
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel",
        ):
            if int(getattr(self, key)) <= 0:
                raise ConfigError(
                    f"model.{key}={getattr(self, key)} must be a positive integer"
                    " for Gated DeltaNet / Kimi delta attention blocks."
                )
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ConfigError(
                f"model.linear_num_value_heads={self.linear_num_value_heads} is not a multiple "
                f"of model.linear_num_key_heads={self.linear_num_key_heads}: each query/key head "
                "serves a whole number of value heads."
            )
        if self.linear_chunk < 0:
            raise ConfigError(
                f"model.linear_chunk={self.linear_chunk} must be >= 0 (0: the "
                "mixer's default chunk)."
            )

    def _validate_fp8(self) -> None:
        """The quantization keys: a known recipe, and no fp8 key set while fp8 is off."""
        for key, allowed in (
            ("quantization", QUANTIZATIONS),
            ("fp8_recipe", FP8_RECIPES),
            ("fp8_format", FP8_FORMATS),
            ("fp8_amax_algo", FP8_AMAX_ALGOS),
        ):
            value = getattr(self, key)
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
        if self.fp8_amax_history < 1:
            raise ConfigError(f"model.fp8_amax_history={self.fp8_amax_history} must be >= 1.")
        if not 0 <= self.fp8_margin <= 8:
            raise ConfigError(
                f"model.fp8_margin={self.fp8_margin} must be between 0 and 8 "
                "(powers of two of headroom)."
            )
        if self.quantization:
            return
        defaults = {f.name: f.default for f in dataclasses.fields(ModelSpec)}
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
            if getattr(self, key) != defaults[key]:
                raise ConfigError(
                    f"model.{key}={getattr(self, key)!r} only applies to fp8 "
                    "matmuls; set model.quantization='fp8' or leave it at its "
                    "default."
                )

    def _validate_layer_pattern(self) -> None:
        """Local / global attention layers, chunks, NoPE and attention temperature keys."""
        for key in ("attention_chunk", "global_layer_step"):
            if getattr(self, key) < 0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be >= 0 (0: off).")
        if self.attention_chunk and self.sliding_window:
            raise ConfigError(
                f"model.attention_chunk={self.attention_chunk} and model."
                f"sliding_window={self.sliding_window} are both set; local layers "
                "use one of them, so set the other to 0."
            )
        if self.leading_global_layers < 0 or self.leading_global_layers >= self.num_layers:
            raise ConfigError(
                f"model.leading_global_layers={self.leading_global_layers} must be "
                f"between 0 and model.num_layers - 1 = {self.num_layers - 1}: at "
                "least one block keeps the sliding window (set the window to 0 "
                "for global attention everywhere)."
            )
        if self.leading_global_layers and not (self.sliding_window or self.attention_chunk):
            raise ConfigError(
                f"model.leading_global_layers={self.leading_global_layers} needs "
                "local layers to follow: set model.sliding_window (or "
                "attention_chunk), or set it to 0."
            )
        if self.global_layer_step == 1:
            raise ConfigError(
                "model.global_layer_step=1 makes every layer global; set it to 0 "
                "and model.sliding_window / attention_chunk to 0 instead."
            )
        if self.nope_global and not self.global_layer_step:
            raise ConfigError(
                "model.nope_global=True needs global layers: set "
                "model.global_layer_step > 1 (Llama 4: 4)."
            )
        if self.attn_temperature_tuning and not self.nope_global:
            raise ConfigError(
                "model.attn_temperature_tuning=True applies to NoPE layers only; "
                "set model.nope_global=True (and global_layer_step) or turn it off."
            )
        if self.attn_floor_scale <= 0:
            raise ConfigError(f"model.attn_floor_scale={self.attn_floor_scale} must be > 0.")
        if self.mla:
            for key in (
                "attention_chunk",
                "global_layer_step",
                "leading_global_layers",
                "attention_sinks",
                "o_bias",
                "qk_l2_norm",
            ):
                if getattr(self, key):
                    raise ConfigError(
                        f"model.{key}={getattr(self, key)!r} is not supported with"
                        " multi-head latent attention (model.kv_lora_rank > 0); "
                        "set it off."
                    )

    def _validate_rope(self) -> None:
        """The context-extension keys of the chosen rope_scaling."""
        if self.rope_scaling == "none":
            return
        if self.rope_factor <= 0:
            raise ConfigError(
                f"model.rope_factor={self.rope_factor} must be > 0 with "
                f"model.rope_scaling={self.rope_scaling!r}."
            )
        if self.rope_scaling == "yarn":
            if self.rope_original_max_len <= 0:
                raise ConfigError(
                    f"model.rope_original_max_len={self.rope_original_max_len} "
                    "must be the positive pretraining context length for yarn."
                )
            for key in ("rope_beta_fast", "rope_beta_slow"):
                if getattr(self, key) <= 0:
                    raise ConfigError(f"model.{key}={getattr(self, key)} must be > 0 for yarn.")
            for key in ("rope_mscale", "rope_mscale_all_dim"):
                if getattr(self, key) < 0:
                    raise ConfigError(
                        f"model.{key}={getattr(self, key)} must be >= 0 (0 means not set)."
                    )

    def _validate_mla(self) -> None:
        """Multi-head latent attention keys: all set consistently, or all left at 0."""
        mla_keys = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        for key in ("kv_lora_rank", *mla_keys):
            if getattr(self, key) < 0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be >= 0.")
        if not self.mla:
            for key in mla_keys:
                if getattr(self, key):
                    raise ConfigError(
                        f"model.{key}={getattr(self, key)} only applies to multi-head latent "
                        "attention; set model.kv_lora_rank > 0 to use it, or set it to 0."
                    )
            return
        if self.qk_rope_head_dim <= 0 or self.qk_rope_head_dim % 2:
            raise ConfigError(
                f"model.qk_rope_head_dim={self.qk_rope_head_dim} must be a "
                "positive even number with model.kv_lora_rank > 0: every head's "
                "query and the shared key carry that many rotary dims."
            )
        if self.v_head_dim <= 0:
            raise ConfigError(
                f"model.v_head_dim={self.v_head_dim} must be a positive integer "
                "with model.kv_lora_rank > 0."
            )
        for key, value in (
            ("qkv_bias", self.qkv_bias),
            ("qk_norm", self.qk_norm),
            ("sliding_window", self.sliding_window),
        ):
            if value:
                raise ConfigError(
                    f"model.{key}={value} is not supported with multi-head latent "
                    "attention (model.kv_lora_rank > 0); set it off."
                )

    def _validate_moe(self) -> None:
        """The mixture-of-experts keys, checked only when num_experts > 0."""
        if self.moe_capacity_factor < 0:
            raise ConfigError(
                f"model.moe_capacity_factor={self.moe_capacity_factor} must be >= 0 "
                "(0: dropless routing; 1.25 is a common capacity)."
            )
        if self.num_experts < 0:
            raise ConfigError(f"model.num_experts={self.num_experts} must be >= 0 (0: dense).")
        if not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ConfigError(
                f"model.num_experts_per_tok={self.num_experts_per_tok} must be "
                f"between 1 and model.num_experts={self.num_experts}."
            )
        if self.moe_intermediate_size <= 0:
            raise ConfigError(
                f"model.moe_intermediate_size={self.moe_intermediate_size} must "
                "be a positive integer when model.num_experts > 0."
            )
        if self.moe_score not in MOE_SCORES:
            raise ConfigError(
                f"model.moe_score={self.moe_score!r} is not one of {list(MOE_SCORES)}."
            )
        for key in (
            "moe_aux_loss_coef",
            "moe_z_loss_coef",
            "moe_shared_experts",
            "moe_shared_intermediate_size",
            "moe_bias_update_rate",
        ):
            if getattr(self, key) < 0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be >= 0.")
        if self.moe_routed_scaling <= 0:
            raise ConfigError(f"model.moe_routed_scaling={self.moe_routed_scaling} must be > 0.")
        if not 0 <= self.num_dense_layers < self.num_layers:
            raise ConfigError(
                f"model.num_dense_layers={self.num_dense_layers} must be between 0 "
                f"and model.num_layers - 1 = {self.num_layers - 1}: at least one "
                "block keeps its experts."
            )
        if self.moe_shared_intermediate_size and not self.moe_shared_experts:
            raise ConfigError(
                f"model.moe_shared_intermediate_size={self.moe_shared_intermediate_size} "
                "sizes shared experts, but model.moe_shared_experts=0; set it to 1 or leave "
                "the size at 0."
            )
        if self.moe_activation not in MOE_ACTIVATIONS:
            raise ConfigError(
                f"model.moe_activation={self.moe_activation!r} is not one of "
                f"{list(MOE_ACTIVATIONS)}."
            )
        for key in ("moe_swiglu_alpha", "moe_swiglu_limit"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be > 0.")
        step = self.moe_layer_step
        if step < 1 or self.num_layers % step:
            raise ConfigError(
                f"model.moe_layer_step={step} must be a positive divisor of "
                f"model.num_layers={self.num_layers}: the blocks form whole groups "
                "of step - 1 dense blocks and one expert block."
            )
        if step > 1 and self.num_dense_layers:
            raise ConfigError(
                f"model.moe_layer_step={step} and model.num_dense_layers="
                f"{self.num_dense_layers} are both set; use leading dense blocks "
                "or interleaved ones, not both."
            )
        if self.moe_score == "topk_sigmoid" and (
            self.moe_score_bias or self.moe_topk_method != "greedy"
        ):
            raise ConfigError(
                "model.moe_score='topk_sigmoid' ranks raw logits; it takes no "
                "model.moe_score_bias and only moe_topk_method='greedy'."
            )
        if self.moe_bias_update_rate and not self.moe_score_bias:
            raise ConfigError(
                f"model.moe_bias_update_rate={self.moe_bias_update_rate} needs the "
                "expert bias it updates; set model.moe_score_bias=True or the "
                "rate to 0."
            )
        self._validate_groups()

    def _validate_groups(self) -> None:
        """Group-limited top-k: groups split the experts evenly and hold k experts between them."""
        if self.moe_topk_method not in MOE_TOPK_METHODS:
            raise ConfigError(
                f"model.moe_topk_method={self.moe_topk_method!r} is not one of "
                f"{list(MOE_TOPK_METHODS)}."
            )
        e, n, g = self.num_experts, self.moe_n_group, self.moe_topk_group
        if n < 1 or e % n:
            raise ConfigError(
                f"model.moe_n_group={n} must divide model.num_experts={e}: groups "
                "hold equal shares of the experts; pick a divisor of num_experts."
            )
        if not 1 <= g <= n:
            raise ConfigError(
                f"model.moe_topk_group={g} must be between 1 and model.moe_n_group"
                f"={n}: a token picks that many groups."
            )
        if self.moe_topk_method == "greedy" and n != 1:
            raise ConfigError(
                f"model.moe_n_group={n} has no effect with model.moe_topk_method="
                "'greedy'; use 'group_limited_greedy' or 'noaux_tc', or set "
                "moe_n_group=moe_topk_group=1."
            )
        if self.num_experts_per_tok > g * (e // n):
            raise ConfigError(
                f"model.num_experts_per_tok={self.num_experts_per_tok} exceeds the "
                f"{g * (e // n)} experts of model.moe_topk_group={g} groups of "
                f"{e // n}; raise moe_topk_group or lower num_experts_per_tok."
            )
        if self.moe_topk_method == "noaux_tc" and e // n < 2:
            raise ConfigError(
                f"model.moe_n_group={n} leaves {e // n} expert per group, but "
                "moe_topk_method='noaux_tc' ranks groups by their two best experts;"
                " use at most num_experts / 2 groups."
            )

    def _attn_matmul_params(self) -> int:
        """One block's attention projection weights (what matmuls multiply by)."""
        d, h = self.hidden_size, self.num_heads
        if self.mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            qr, kvr = self.q_lora_rank, self.kv_lora_rank
            q = d * qr + qr * h * qk if qr else d * h * qk
            kv = d * (kvr + self.qk_rope_head_dim) + kvr * h * (
                self.qk_nope_head_dim + self.v_head_dim
            )
            return q + kv + h * self.v_head_dim * d
        kv, hd = self.num_kv_heads, self.head_dim
        return d * h * hd + 2 * d * kv * hd + h * hd * d

    def _attn_params(self) -> int:
        """One block's attention parameters: projections plus biases, norm weights and sinks."""
        extra = 0
        if self.mla:
            extra = self.q_lora_rank + self.kv_lora_rank  # the two latent RMSNorms
        if self.qkv_bias:
            extra += (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        if self.qk_norm:
            extra += 2 * self.head_dim
        if self.o_bias:
            extra += self.hidden_size
        if self.attention_sinks:
            extra += self.num_heads
        return self._attn_matmul_params() + extra

    def _expert_weights(self) -> int:
        """Weight matrices per expert: two for ungated relu2 experts, three for gated ones."""
        return 2 if self.moe_activation == "relu2" else 3

    def _expert_params(self, with_biases: bool) -> int:
        """One routed expert's weights (and its biases when counted)."""
        d, f = self.hidden_size, self.moe_intermediate_size
        biases = 2 * f + d if with_biases and self.moe_expert_bias else 0
        return self._expert_weights() * d * f + biases

    def shared_expert_size(self) -> int:
        """The hidden size of the shared experts' one MLP (0 without shared experts)."""
        if not self.moe_shared_experts:
            return 0
        return self.moe_shared_intermediate_size or (
            self.moe_shared_experts * self.moe_intermediate_size
        )

    def _shared_params(self) -> int:
        """The shared experts' weights (gated or relu2 like the routed ones)."""
        return self._expert_weights() * self.hidden_size * self.shared_expert_size()

    def _ffn_params(self, experts: int, with_biases: bool = True) -> int:
        """Feed-forward parameters of all blocks, with `experts` routed experts counted in each
        expert block (its router and shared experts included); biases only when asked (FLOPs
        count matmul weights)."""
        d, f = self.hidden_size, self.intermediate_size
        dense_biases = 2 * f + d if with_biases and self.mlp_bias else 0
        dense = (self.num_layers - self.num_moe_layers) * (3 * d * f + dense_biases)
        if not self.num_experts:
            return dense
        routed = experts * self._expert_params(with_biases)
        shared = self._shared_params()
        if self.moe_residual_mlp:
            shared += 3 * d * self.intermediate_size
        router = d * self.num_experts
        if with_biases and self.moe_router_bias:
            router += self.num_experts
        return dense + self.num_moe_layers * (routed + shared + router)

    def num_params(self) -> int:
        """Parameter count, embeddings included (the figure model cards publish).

        The aux-free expert bias is a buffer, not a parameter, as in transformers.
        """
        d = self.hidden_size
        embed = self.vocab_size * d * (1 if self.tie_embeddings else 2)
        if self.block_pattern:
            return (
                embed
                + d
                + sum(
                    blocks.kind_params(self, kind)
                    for kind in blocks.pattern_kinds(self.block_pattern)
                )
            )
        layer = self._attn_params() + (4 if self.post_norms else 2) * d
        return self.num_layers * layer + self._ffn_params(self.num_experts) + embed + d

    def num_active_params(self) -> int:
        """Parameters one token uses: `num_params` with only its top-k experts counted."""
        if not self.num_experts:
            return self.num_params()
        unused = self.num_experts - self.num_experts_per_tok
        return self.num_params() - self.num_moe_layers * unused * self._expert_params(True)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6 x matmul params (no embedding gather) + attention.

        Attention scores and values cost 2 x L x T x N x (Dqk + Dv) FLOPs forward per token at
        sequence length T (Dqk = Dv = head_dim for GQA; MLA's query-key width is qk_nope +
        qk_rope and its value width v_head_dim), with causal masking halving that (the PaLM
        appendix B convention counts the full T); we count the causal half, times 3 for
        forward + backward. Expert blocks count the router, the shared experts and the top-k
        routed experts; MLA counts its low-rank projections as the weights they are. A local
        layer's context is its sliding window or chunk in place of T when shorter.
        """
        if self.block_pattern:  # per sublayer kind, see blocks.kind_flops
            head = 6.0 * self.vocab_size * self.hidden_size
            return head + sum(
                blocks.kind_flops(self, kind, seq_len)
                for kind in blocks.pattern_kinds(self.block_pattern)
            )
        matmul = self.num_layers * self._attn_matmul_params()
        matmul += self._ffn_params(self.num_experts_per_tok, with_biases=False)
        matmul += self.vocab_size * self.hidden_size  # the output projection
        if self.mla:
            qk, v = self.qk_nope_head_dim + self.qk_rope_head_dim, self.v_head_dim
        else:
            qk = v = self.head_dim
        kinds, per_layer = attention_kinds(self)
        contexts = [min(seq_len, kinds[i].window or kinds[i].chunk or seq_len) for i in per_layer]
        attention = sum(contexts) * 2 * self.num_heads * (qk + v) / 2
        return 6.0 * matmul + 3.0 * attention
