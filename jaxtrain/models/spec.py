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


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the key and the fix."""


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Hyperparameters of one dense decoder (Llama 2/3, Qwen 2.5/3, Mistral by configuration)."""

    family: str = "llama"  # informational: llama, qwen2, qwen3, mistral
    vocab_size: int = 32000
    hidden_size: int = 4096
    num_layers: int = 32
    num_heads: int = 32
    num_kv_heads: int = 32
    head_dim: int = 128
    intermediate_size: int = 11008
    max_seq_len: int = 4096
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: str = "none"  # none | llama3 | linear
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_len: int = 8192
    tie_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    sliding_window: int = 0  # 0: full causal attention
    init_std: float = 0.02
    param_dtype: str = "float32"
    dtype: str = "float32"  # compute dtype
    remat: str = "none"
    scan_layers: bool = True

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

    def num_params(self) -> int:
        """Parameter count, embeddings included (the figure model cards publish)."""
        d, h, kv, hd, f = (self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim,
                           self.intermediate_size)
        attn = d * h * hd + 2 * d * kv * hd + h * hd * d
        if self.qkv_bias:
            attn += h * hd + 2 * kv * hd
        if self.qk_norm:
            attn += 2 * hd
        layer = attn + 3 * d * f + 2 * d
        embed = self.vocab_size * d * (1 if self.tie_embeddings else 2)
        return self.num_layers * layer + embed + d

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6 x matmul params (no embedding gather) + attention.

        Attention scores and values cost 2 x 2 x L x T x H x Dh FLOPs forward per token at
        sequence length T with causal masking halving that (the PaLM appendix B convention
        counts the full T); we count the causal half, times 3 for forward + backward.
        """
        d, h, kv, hd, f = (self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim,
                           self.intermediate_size)
        matmul = self.num_layers * (d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * f)
        matmul += self.vocab_size * d  # the output projection
        context = min(seq_len, self.sliding_window) if self.sliding_window else seq_len
        attention = self.num_layers * 2 * 2 * h * hd * context / 2
        return 6.0 * matmul + 3.0 * attention
