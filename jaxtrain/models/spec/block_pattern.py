"""Hybrid block patterns: Megatron's per-sublayer pattern string (`M*M-`), which sublayer kind each
character stands for, how a pattern is scanned, and what each kind costs (parameters, FLOPs).

A pattern holds one character per sublayer; every sublayer is `x + mixer(norm(x))` with its own
pre-norm. `M` is a Mamba mixer (Mamba-2, or Mamba-1 with `mamba_version=1`), `*` attention (MLA
when the spec has `kv_lora_rank`), `-` an MLP, `E` a mixture of experts, `G` a Gated DeltaNet
and `K` a Kimi delta attention mixer (both sized by the spec's `linear_*` keys). Megatron's
`MambaModel` and transformers' `NemotronHForCausalLM` (`hybrid_override_pattern` /
`layers_block_type`) use the same characters for M * - E; a pure Mamba model is `M` repeated.
Primus' Zebra-Llama layer specs build their GDN / KDA blocks where Megatron's pattern says `M`;
`jaxtrain.compat.megatron.mamba` writes those as `G` / `K`.

The stack is scanned over repeats of the pattern's shortest period (`period`), so a model of
48 `M*-` groups compiles one group. A pattern with no shorter period runs unrolled.

Adding a mixer kind: (1) a character in `KINDS` (and its name in `NOT_BUILT` until the module
exists), (2) its parameter and FLOP counts in `kind_params` / `kind_flops`, (3) a `MixerType`
entry in `jaxtrain.models.assembly.hybrid.MIXERS` (module, call, decoding cache), (4) its sharding names
in `jaxtrain.parallel.sharding`, and (5) its tensor names in `jaxtrain.interop.hf_ssm` when it converts.
"""

from __future__ import annotations

import math
from typing import Any

from jaxtrain.models.spec import block_sizes
from jaxtrain.models.spec import delta_sizes as sizes

# Pattern character -> sublayer kind.
KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe", "G": "gdn", "K": "kda"}
# Characters other stacks' patterns use for mixers jaxtrain does not build yet.
NOT_BUILT: dict[str, str] = {}


def pattern_kinds(pattern: str) -> list[str]:
    """The sublayer kind of every character; ValueError naming an unknown character."""
    for ch in pattern:
        if ch in NOT_BUILT:
            raise ValueError(
                f"character {ch!r} is a {NOT_BUILT[ch]} mixer, which jaxtrain does not build yet"
            )
        if ch not in KINDS:
            raise ValueError(
                f"character {ch!r} is not one of {sorted(KINDS)} "
                "(M mamba, * attention, - mlp, E moe, G gated delta net, K Kimi delta attention)"
            )
    return [KINDS[ch] for ch in pattern]


def period(pattern: str) -> int:
    """The shortest p that the pattern is a whole number of repeats of."""
    n = len(pattern)
    for p in range(1, n + 1):
        if n % p == 0 and pattern[:p] * (n // p) == pattern:
            return p
    return n


def ssm_heads(spec: Any) -> int:
    """Mamba-2 heads: `ssm_num_heads`, or expand x hidden / head_dim when it is 0."""
    return spec.ssm_num_heads or spec.ssm_expand * spec.hidden_size // spec.ssm_head_dim


def ssm_inner(spec: Any) -> int:
    """Width of the Mamba mixer's inner (expanded) channels."""
    if spec.mamba_version == 1:
        return spec.ssm_expand * spec.hidden_size
    return ssm_heads(spec) * spec.ssm_head_dim


def ssm_dt_rank(spec: Any) -> int:
    """Mamba-1's low-rank time-step width: `ssm_dt_rank`, or ceil(hidden / 16) when 0."""
    return spec.ssm_dt_rank or math.ceil(spec.hidden_size / 16)


def conv_channels(spec: Any) -> int:
    """Channels of the causal convolution: x (Mamba-1), or x, B and C (Mamba-2)."""
    if spec.mamba_version == 1:
        return ssm_inner(spec)
    return ssm_inner(spec) + 2 * spec.ssm_n_groups * spec.ssm_state_size


def _mamba_matmul(spec: Any) -> int:
    d, di, n = spec.hidden_size, ssm_inner(spec), spec.ssm_state_size
    if spec.mamba_version == 1:
        r = ssm_dt_rank(spec)
        return d * 2 * di + di * (r + 2 * n) + r * di + di * d
    h, g = ssm_heads(spec), spec.ssm_n_groups
    return d * (2 * di + 2 * g * n + h) + di * d


def _mamba_params(spec: Any) -> int:
    d, di, n, k = spec.hidden_size, ssm_inner(spec), spec.ssm_state_size, spec.ssm_conv_kernel
    c = conv_channels(spec)
    conv = c * k + (c if spec.ssm_conv_bias else 0)
    if spec.mamba_version == 1:
        bias = 2 * di + d if spec.ssm_proj_bias else 0
        # dt_proj bias, A_log [di, N], D [di]
        return _mamba_matmul(spec) + conv + di + di * n + di + bias
    h = ssm_heads(spec)
    bias = (2 * di + 2 * spec.ssm_n_groups * n + h) + d if spec.ssm_proj_bias else 0
    # dt_bias, A_log, D per head; the gated norm's weight
    return _mamba_matmul(spec) + conv + 3 * h + di + bias


def _mlp_matmul(spec: Any) -> int:
    per = 2 if spec.mlp_activation == "relu2" else 3  # ungated relu2: no gate projection
    return per * spec.hidden_size * spec.intermediate_size


def kind_params(spec: Any, kind: str) -> int:
    """Parameters of one sublayer of `kind`, its pre-norm included."""
    d = spec.hidden_size
    if kind == "mamba":
        return _mamba_params(spec) + d
    if kind == "attention":
        return block_sizes.attention_params(spec) + d
    if kind == "mlp":
        return _mlp_matmul(spec) + d
    if kind == "moe":
        e = spec.num_experts
        return (
            e * block_sizes.expert_params(spec, True) + block_sizes.shared_params(spec) + d * e + d
        )
    if kind in ("gdn", "kda"):
        return (sizes.gdn_params(spec) if kind == "gdn" else sizes.kda_params(spec)) + d
    raise KeyError(kind)


def kind_flops(spec: Any, kind: str, seq_len: int) -> float:
    """Training FLOPs per token of one sublayer: 6 x matmul weights plus 3 x the forward
    FLOPs of what is not a weight product (attention scores, the scan, the convolution).

    The Mamba-2 scan (chunk Q, heads H, head width P, state N) costs H Q (N + P) per token
    inside chunks (the causal half of C B^T and of its product with x), 2 H P N to fold a token
    into its chunk's state and 2 H P N to read the previous state out; Mamba-1's per-channel
    recurrence about 5 x inner x N (decay, update, read-out); the convolution 2 x kernel per
    channel. Gated DeltaNet and KDA count their chunked delta rule as `delta_rule` does (per
    token, independent of the sequence length).
    """
    if kind == "mamba":
        conv = 2 * spec.ssm_conv_kernel * conv_channels(spec)
        n = spec.ssm_state_size
        if spec.mamba_version == 1:
            scan = 5 * ssm_inner(spec) * n
        else:
            h, p = ssm_heads(spec), spec.ssm_head_dim
            q = min(spec.ssm_chunk_size, seq_len)
            scan = h * q * (n + p) + 4 * h * p * n
        return 6.0 * _mamba_matmul(spec) + 3.0 * (scan + conv)
    if kind == "attention":
        if spec.mla:
            qk, v = spec.qk_nope_head_dim + spec.qk_rope_head_dim, spec.v_head_dim
        else:
            qk = v = spec.head_dim
        scores = seq_len * spec.num_heads * (qk + v)  # causal half of 2 x L x N x (Dqk + Dv)
        return 6.0 * block_sizes.attention_matmul_params(spec) + 3.0 * scores
    if kind == "mlp":
        return 6.0 * _mlp_matmul(spec)
    if kind == "moe":
        d, k = spec.hidden_size, spec.num_experts_per_tok
        matmul = (
            k * block_sizes.expert_params(spec, False)
            + block_sizes.shared_params(spec)
            + d * spec.num_experts
        )
        return 6.0 * matmul
    if kind in ("gdn", "kda"):
        return sizes.gdn_flops_per_token(spec) if kind == "gdn" else sizes.kda_flops_per_token(spec)
    raise KeyError(kind)


# Attention sizes of an attention-free model: valid placeholders, never built.
NO_ATTENTION = dict(num_heads=1, num_kv_heads=1, head_dim=2, intermediate_size=1)
