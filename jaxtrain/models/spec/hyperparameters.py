"""The frozen hyperparameters of a decoder model, checked before any model code runs.

A `ModelSpec` is what model code sees; the ml-collections `config.model` section is turned into
one by `ModelSpec.from_config`, which names the offending key when a value cannot work.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from jaxtrain.models.spec import block_pattern as blocks
from jaxtrain.models.spec import block_sizes as sizes
from jaxtrain.models.spec import checks
from jaxtrain.models.spec.layer_pattern import attention_kinds

_DTYPES = {name: getattr(jnp, name) for name in checks.DTYPES}


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Hyperparameters of one decoder (Llama 2/3, Qwen 2.5/3, Mistral, Gemma 1/2/3, OLMo 3,
    GPT-3; Mixtral, Qwen3-MoE, DeepSeek V2/V3, gpt-oss and Llama 4 when `num_experts` > 0,
    which swaps the MLP of every block after the first `num_dense_layers` (or of every
    `moe_layer_step`-th block) for a mixture of experts; `kv_lora_rank` > 0 swaps grouped-query
    attention for multi-head latent attention; `global_layer_step` alternates local and global
    attention layers; a `block_pattern` makes a hybrid stack: Mamba, Nemotron-H, Zebra-Llama,
    Qwen3-Next and Qwen3.5)."""

    family: str = "llama"  # informational: llama, qwen2, qwen3, mistral, mixtral, deepseek_v3, ...
    vocab_size: int = 32000  # rows of the embedding and output projection
    hidden_size: int = 4096  # model width d
    num_layers: int = 32  # decoder blocks
    num_heads: int = 32  # query heads
    num_kv_heads: int = 32  # key/value heads; < num_heads is grouped-query attention
    head_dim: int = 128  # width of each attention head (even: rotary embeddings)
    intermediate_size: int = 11008  # hidden width of the SwiGLU MLP
    max_seq_len: int = 4096  # longest sequence (training windows, prompt + generated tokens)
    norm_eps: float = 1e-5  # RMSNorm (LayerNorm) epsilon
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
    # FP8 matmuls (jaxtrain/models/layers/fp8.py, docs/fp8.md): the attention, MLP and expert
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
    #   relu2 (relu(x)^2, ungated; hybrid MLP sublayers only, Nemotron-H) | gelu (ungated, GPT-3)
    attn_logit_softcap: float = 0.0  # caps scaled q.k scores before the softmax (Grok: 30)
    attn_temperature_len: int = 0  # > 0: queries at index i > this scale by log2(i) / log2(it)
    router_logit_softcap: float = 0.0  # caps the router logits (Grok-2: 30)
    final_logit_softcap: float = 0.0  # caps the output logits (Grok-2: 50)
    post_norms: bool = False  # RMSNorm on the attention and MLP outputs before each residual add
    embed_multiplier: float = 1.0  # scales the token embeddings (Grok-1: 78.38 = sqrt(6144))
    output_multiplier: float = 1.0  # scales the output logits (Grok-1: 1 / sqrt(3))
    moe_residual_mlp: bool = False  # a dense MLP beside the experts, (mlp + moe) / sqrt(2)
    # Gemma 1/2/3 (with geglu, post_norms, the soft-caps and embed_multiplier sqrt(d) above).
    norm_zero_centered: bool = False  # RMSNorms scale by 1 + weight, weights start at 0 (Gemma)
    query_pre_attn_scalar: float = 0.0  # > 0: scores scale by this^-0.5, not head_dim^-0.5
    rope_local_theta: float = 0.0  # > 0: the rotary base of sliding-window blocks, unscaled
    #   (Gemma 3: 10k local, rope_theta and rope_scaling on the global blocks); 0: rope_theta
    # OLMo 2/3 (norms after the sublayers only, qk-norm across heads) and GPT-3 (MaxText's
    # gpt3 block, laid out as GPT-2: LayerNorms, learned positions, an ungated GELU MLP).
    pre_norms: bool = True  # norm the attention and MLP inputs; False: post_norms alone (OLMo)
    qk_norm_across_heads: bool = False  # qk_norm over all heads of q (of k) at once (OLMo)
    norm_type: str = "rms"  # rms | layer (LayerNorm: mean removed, then scale and bias; GPT-3)
    learned_positions: int = 0  # > 0: learned absolute positions in place of RoPE (GPT-3)
    #   this many rows added to the token embeddings (2048; MaxText's trainable_position_size)
    # Hybrid and state-space models (jaxtrain/models/assembly/hybrid.py, docs/models.md): one pre-norm
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
    # Qwen3-Next and Qwen3.5 (hybrids of Gated DeltaNet and gated attention, with zero-centred
    # norms and qk_norm): a sigmoid gate on every attention output channel, RoPE on the first
    # part of each head only, and a sigmoid gate on the shared experts' output.
    attn_output_gate: bool = False  # attention output x sigmoid(x W_gate), per head and dim
    partial_rotary_factor: float = 1.0  # RoPE turns the first this fraction of each head
    moe_shared_gate: bool = False  # shared experts x sigmoid(x w_gate) (Qwen3-Next, Qwen3.5)

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
        """Width the rotary tables cover: the head (its first `partial_rotary_factor` of it),
        or MLA's rotary part."""
        return (
            self.qk_rope_head_dim if self.mla else int(self.head_dim * self.partial_rotary_factor)
        )

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
        """Raises ConfigError naming the first `model.*` key whose value cannot work: a
        number out of its range (`ranges`), then the relations between fields (`checks`)."""
        checks.validate(self)

    def shared_expert_size(self) -> int:
        """The hidden size of the shared experts' one MLP (0 without shared experts)."""
        return sizes.shared_expert_size(self)

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
        layer = sizes.attention_params(self) + sizes.block_norm_params(self)
        embed += self.learned_positions * d
        ffn = sizes.ffn_params(self, self.num_experts)
        return self.num_layers * layer + ffn + embed + sizes.norm_params(self)

    def num_active_params(self) -> int:
        """Parameters one token uses: `num_params` with only its top-k experts counted."""
        if not self.num_experts:
            return self.num_params()
        unused = self.num_experts - self.num_experts_per_tok
        return self.num_params() - self.num_moe_layers * unused * sizes.expert_params(self, True)

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
        matmul = self.num_layers * sizes.attention_matmul_params(self)
        matmul += sizes.ffn_params(self, self.num_experts_per_tok, with_biases=False)
        matmul += self.vocab_size * self.hidden_size  # the output projection
        if self.mla:
            qk, v = self.qk_nope_head_dim + self.qk_rope_head_dim, self.v_head_dim
        else:
            qk = v = self.head_dim
        kinds, per_layer = attention_kinds(self)
        contexts = [min(seq_len, kinds[i].window or kinds[i].chunk or seq_len) for i in per_layer]
        attention = sum(contexts) * 2 * self.num_heads * (qk + v) / 2
        return 6.0 * matmul + 3.0 * attention
