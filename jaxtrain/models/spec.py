"""The frozen hyperparameters of a decoder model, checked before any model code runs.

A `ModelSpec` is what model code sees; the ml-collections `config.model` section is turned into
one by `ModelSpec.from_config`, which names the offending key when a value cannot work.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
ROPE_SCALINGS = ("none", "llama3", "linear")
REMAT_POLICIES = ("none", "full", "dots", "dots_with_no_batch_dims", "minimal")
MOE_SCORES = ("topk_softmax", "softmax_topk")  # Mixtral | Qwen-MoE router scoring


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the key and the fix."""


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Hyperparameters of one decoder (Llama 2/3, Qwen 2.5/3, Mistral; Mixtral and Qwen3-MoE
    when `num_experts` > 0, which swaps every block's MLP for a mixture of experts)."""

    family: str = "llama"  # informational: llama, qwen2, qwen3, mistral
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
    rope_scaling: str = "none"  # none | llama3 | linear
    rope_factor: float = 1.0  # context extension factor of llama3 / linear rope_scaling
    rope_low_freq_factor: float = 1.0  # llama3 rope_scaling: low-frequency boundary
    rope_high_freq_factor: float = 4.0  # llama3 rope_scaling: high-frequency boundary
    rope_original_max_len: int = 8192  # llama3 rope_scaling: pretraining context length
    tie_embeddings: bool = False  # output projection shares the embedding matrix
    qkv_bias: bool = False  # biases on the q/k/v projections (Qwen 2.5)
    qk_norm: bool = False  # RMSNorm on queries and keys per head (Qwen 3)
    sliding_window: int = 0  # 0: full causal attention
    init_std: float = 0.02  # standard deviation of the normal weight init
    param_dtype: str = "float32"  # dtype parameters are stored (and optimized) in
    dtype: str = "float32"  # compute dtype
    remat: str = "none"  # recompute activations in backward: one of REMAT_POLICIES
    scan_layers: bool = True  # scan over the stacked blocks; False unrolls (same params)
    num_experts: int = 0  # 0: dense MLP in every block
    num_experts_per_tok: int = 2  # top-k
    moe_intermediate_size: int = 0  # each expert's hidden size
    moe_score: str = "topk_softmax"  # topk_softmax (Mixtral) | softmax_topk (Qwen-MoE)
    moe_norm_topk: bool = True  # softmax_topk: renormalise the k kept probabilities
    moe_aux_loss_coef: float = 0.0  # load-balancing loss weight
    moe_z_loss_coef: float = 0.0  # router z-loss weight

    @property
    def jnp_dtype(self) -> Any:
        return _DTYPES[self.dtype]

    @property
    def jnp_param_dtype(self) -> Any:
        return _DTYPES[self.param_dtype]

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
        positive = ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                    "head_dim", "intermediate_size", "max_seq_len")
        for key in positive:
            if int(getattr(self, key)) <= 0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be a positive integer.")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"model.num_heads={self.num_heads} is not divisible by model.num_kv_heads="
                f"{self.num_kv_heads}: grouped-query attention shares each kv head among a whole "
                "number of query heads; pick num_kv_heads among the divisors of num_heads.")
        if self.head_dim % 2:
            raise ConfigError(f"model.head_dim={self.head_dim} must be even for rotary embeddings.")
        for key, allowed in (("dtype", _DTYPES), ("param_dtype", _DTYPES),
                             ("rope_scaling", ROPE_SCALINGS), ("remat", REMAT_POLICIES)):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"model.{key}={getattr(self, key)!r} is not one of "
                                  f"{sorted(allowed)}.")
        if self.sliding_window < 0:
            raise ConfigError(f"model.sliding_window={self.sliding_window} must be >= 0 "
                              "(0 means full causal attention).")
        if self.num_experts:
            self._validate_moe()

    def _validate_moe(self) -> None:
        """The mixture-of-experts keys, checked only when num_experts > 0."""
        if self.num_experts < 0:
            raise ConfigError(f"model.num_experts={self.num_experts} must be >= 0 (0: dense).")
        if not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ConfigError(f"model.num_experts_per_tok={self.num_experts_per_tok} must be "
                              f"between 1 and model.num_experts={self.num_experts}.")
        if self.moe_intermediate_size <= 0:
            raise ConfigError(f"model.moe_intermediate_size={self.moe_intermediate_size} must "
                              "be a positive integer when model.num_experts > 0.")
        if self.moe_score not in MOE_SCORES:
            raise ConfigError(f"model.moe_score={self.moe_score!r} is not one of "
                              f"{list(MOE_SCORES)}.")
        for key in ("moe_aux_loss_coef", "moe_z_loss_coef"):
            if getattr(self, key) < 0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be >= 0.")

    def _mlp_params(self, experts: int) -> int:
        """One block's feed-forward parameters with `experts` experts counted (router included)."""
        d = self.hidden_size
        if not self.num_experts:
            return 3 * d * self.intermediate_size
        return experts * 3 * d * self.moe_intermediate_size + d * self.num_experts

    def num_params(self) -> int:
        """Parameter count, embeddings included (the figure model cards publish)."""
        d, h, kv, hd = self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim
        attn = d * h * hd + 2 * d * kv * hd + h * hd * d
        if self.qkv_bias:
            attn += h * hd + 2 * kv * hd
        if self.qk_norm:
            attn += 2 * hd
        layer = attn + self._mlp_params(self.num_experts) + 2 * d
        embed = self.vocab_size * d * (1 if self.tie_embeddings else 2)
        return self.num_layers * layer + embed + d

    def num_active_params(self) -> int:
        """Parameters one token uses: `num_params` with only its top-k experts counted."""
        if not self.num_experts:
            return self.num_params()
        unused = self.num_experts - self.num_experts_per_tok
        return self.num_params() - self.num_layers * unused * 3 * self.hidden_size * (
            self.moe_intermediate_size)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6 x matmul params (no embedding gather) + attention.

        Attention scores and values cost 2 x 2 x L x T x H x Dh FLOPs forward per token at
        sequence length T with causal masking halving that (the PaLM appendix B convention
        counts the full T); we count the causal half, times 3 for forward + backward.
        """
        d, h, kv, hd = self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim
        # Mixture of experts: only the top-k experts (and the router) run for a token.
        mlp = self._mlp_params(self.num_experts_per_tok)
        matmul = self.num_layers * (d * h * hd + 2 * d * kv * hd + h * hd * d + mlp)
        matmul += self.vocab_size * d  # the output projection
        context = min(seq_len, self.sliding_window) if self.sliding_window else seq_len
        attention = self.num_layers * 2 * 2 * h * hd * context / 2
        return 6.0 * matmul + 3.0 * attention
