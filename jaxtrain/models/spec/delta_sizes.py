"""Sizes of the delta-rule mixers (Gated DeltaNet, KDA): parameters and training FLOPs per token.

The spec counts these for every hybrid stack (`block_pattern.kind_params` / `kind_flops`), so
they live apart from the modules that build the layers: those import the spec, and the spec
imports this file. `spec` is any object with ModelSpec's `linear_*` fields.
"""

from __future__ import annotations

from typing import Any

GDN_DEFAULT_CHUNK = 64
# KDA's within-chunk decays are [C, C, K] per head (one per key channel), so its chunks are
# shorter than Gated DeltaNet's: C = 16 keeps that tensor at 16 K floats per token and head.
KDA_DEFAULT_CHUNK = 16


def conv_params(spec: Any) -> int:
    """Weights of the three short convs over q, k and v (0 without them)."""
    if not spec.linear_short_conv:
        return 0
    channels = (
        2 * spec.linear_num_key_heads * spec.linear_key_head_dim
        + spec.linear_num_value_heads * spec.linear_value_head_dim
    )
    return spec.linear_conv_kernel * channels


def gdn_matmul_params(spec: Any) -> int:
    """One Gated DeltaNet mixer's projection weights (what matmuls multiply by)."""
    d, n, h = spec.hidden_size, spec.linear_num_key_heads, spec.linear_num_value_heads
    kd, vd = spec.linear_key_head_dim, spec.linear_value_head_dim
    gate = h * vd if spec.linear_output_gate else 0
    return d * (2 * n * kd + 2 * h * vd + 2 * h + gate)


def gdn_params(spec: Any) -> int:
    """One Gated DeltaNet mixer's parameters: projections, convs, A_log, dt_bias, norm."""
    h, vd = spec.linear_num_value_heads, spec.linear_value_head_dim
    return gdn_matmul_params(spec) + conv_params(spec) + 2 * h + vd


def gdn_flops_per_token(spec: Any) -> float:
    """Training FLOPs per token of one Gated DeltaNet mixer: 6 x projection weights + 3 x the
    forward FLOPs of the chunked delta rule (which do not grow with the sequence length)."""
    return _flops(spec, gdn_matmul_params(spec), GDN_DEFAULT_CHUNK, per_channel=False)


def kda_matmul_params(spec: Any) -> int:
    """One KDA mixer's projection weights: q/k/v, the two low-rank gates, beta and the output."""
    d, n, h = spec.hidden_size, spec.linear_num_key_heads, spec.linear_num_value_heads
    kd, vd = spec.linear_key_head_dim, spec.linear_value_head_dim
    qkv = d * (2 * n * kd + h * vd)
    gates = (d * vd + vd * h * kd) + (d * vd + vd * h * vd) + d * h
    return qkv + gates + h * vd * d


def kda_params(spec: Any) -> int:
    """One KDA mixer's parameters: projections, convs, A_log, dt_bias, norm, gate bias."""
    h, kd, vd = spec.linear_num_value_heads, spec.linear_key_head_dim, spec.linear_value_head_dim
    bias = h * vd if spec.linear_gate_bias else 0
    return kda_matmul_params(spec) + conv_params(spec) + h + h * kd + vd + bias


def kda_flops_per_token(spec: Any) -> float:
    """Training FLOPs per token of one KDA mixer: 6 x projection weights + 3 x the forward FLOPs
    of the chunked delta rule with per-channel decays."""
    return _flops(spec, kda_matmul_params(spec), KDA_DEFAULT_CHUNK, per_channel=True)


def _flops(spec: Any, matmul_params: int, default_chunk: int, per_channel: bool) -> float:
    """6 x the projection weights + 3 x the forward FLOPs of the chunked delta rule."""
    kernel = chunked_rule_flops_per_token(
        spec.linear_num_value_heads,
        spec.linear_key_head_dim,
        spec.linear_value_head_dim,
        spec.linear_chunk or default_chunk,
        per_channel=per_channel,
    )
    return 6.0 * matmul_params + 3.0 * kernel


def chunked_rule_flops_per_token(
    heads: int, key_dim: int, value_dim: int, chunk: int, per_channel: bool
) -> float:
    """Forward FLOPs per token of `mixers.delta_rule.chunked_delta_rule` for `heads` value heads.

    Per chunk and head: the [C, C] key-key and query-key products (2 C^2 K each; the per-channel
    decay adds a multiply per term, counted as 1 C^2 K more each), the two triangular solves
    (C^2 (V + K)), the reads of the carried state by w and q and the write of the new one
    (2 C K V each), and the intra-chunk output (2 C^2 V). Divided by C for a per-token figure;
    the causal masks' zeros are counted, as the dense products compute them.
    """
    c, kd, vd = chunk, key_dim, value_dim
    square = (4 + (2 if per_channel else 0)) * c * kd + c * (vd + kd) + 2 * c * vd
    return float(heads * (square + 6 * kd * vd))
