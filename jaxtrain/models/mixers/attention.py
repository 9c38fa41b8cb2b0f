"""Grouped-query causal self-attention with RoPE, optional qkv / output biases, qk-norm (per
head, or across heads as OLMo has it), sliding windows, chunked local attention, attention
sinks, document (segment) masking and a key/value cache for decoding.

Training (no cache) runs the implementation `model.attention_impl` picks (see
`self_attention`); decoding with a cache uses the plain masked softmax below. Blocks of one
stack may differ in their `AttentionKind` (gpt-oss: sliding and full; Llama 4: chunked RoPE and
global NoPE): the block gets its kind's index and switches between the static variants.

Shape letters: B batch, L query length, S key length, D embed, N query heads, K kv heads,
G query heads per kv head (N = K x G), H head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain.hardware import backend
from jaxtrain.models.layers import fp8
from jaxtrain.models.layers.basic import Dense, RMSNorm, make_param
from jaxtrain.models.layers.basic import softcap as _softcap  # `softcap` names a keyword here
from jaxtrain.models.layers.products import float32_operands
from jaxtrain.models.layers.rope import apply_rope, apply_rope_interleaved
from jaxtrain.models.mixers.blockwise_attention import blockwise_causal_attention
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.models.spec.layer_pattern import AttentionKind, attention_kinds
from jaxtrain.parallel import sharding

_MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)
_FULL = AttentionKind()


def attention_mask(
    q_index_BL: jnp.ndarray,
    kv_index_BS: jnp.ndarray,
    *,
    window: int,
    chunk: int = 0,
    kv_valid_BS: jnp.ndarray | None = None,
    q_segment_BL: jnp.ndarray | None = None,
    kv_segment_BS: jnp.ndarray | None = None,
) -> jnp.ndarray:
    """Boolean [B, L, S]: causal by token index, inside the window or chunk (index // chunk
    equal), same document, filled slot."""
    q, kv = q_index_BL[:, :, None], kv_index_BS[:, None, :]
    allowed = kv <= q
    if window:
        allowed &= q - kv < window
    if chunk:
        allowed &= q // chunk == kv // chunk
    if kv_valid_BS is not None:
        allowed &= kv_valid_BS[:, None, :]
    if q_segment_BL is not None and kv_segment_BS is not None:
        allowed &= q_segment_BL[:, :, None] == kv_segment_BS[:, None, :]
    return allowed


def _use_cudnn(
    spec: ModelSpec,
    q_BLNH: jnp.ndarray,
    v_BLKV: jnp.ndarray,
    segment_BL: jnp.ndarray | None,
    kind: AttentionKind = _FULL,
    sinks: bool = False,
) -> bool:
    """Whether training attention goes through cuDNN's fused kernel."""
    # jax's cuDNN entry point has no sink logits and no chunked (block-diagonal) mask.
    inexpressible = {
        "model.attention_sinks": sinks,
        "model.attention_chunk": kind.chunk,
        "model.attn_logit_softcap": spec.attn_logit_softcap,
    }
    if spec.attention_impl == "cudnn":
        for key, used in inexpressible.items():
            if used:
                raise ValueError(
                    f"model.attention_impl='cudnn' cannot express {key}="
                    f"{used!r}; use 'blockwise', 'dot' or 'auto'."
                )
    if spec.attention_impl != "auto":
        return spec.attention_impl == "cudnn"
    if any(inexpressible.values()):
        return False
    # Where the kernel applies: NVIDIA GPUs, half-precision inputs, equal query and value head
    # dims it supports, and no per-token document masks (which jax's cuDNN entry point cannot
    # express).
    head_dim = q_BLNH.shape[-1]
    return (
        segment_BL is None
        and spec.dtype in ("bfloat16", "float16")
        and backend.current().cudnn_attention
        and head_dim == v_BLKV.shape[-1]
        and head_dim <= 128
        and head_dim % 8 == 0
    )


def fused_attention(
    q_BLNH: jnp.ndarray,
    k_BLKH: jnp.ndarray,
    v_BLKH: jnp.ndarray,
    scale: float,
    window: int,
    implementation: str | None,
) -> jnp.ndarray:
    """Causal attention through `jax.nn.dot_product_attention` ("cudnn", or "xla")."""
    local_window = (window - 1, 0) if window else None
    return jax.nn.dot_product_attention(
        q_BLNH,
        k_BLKH,
        v_BLKH,
        scale=scale,
        is_causal=True,
        local_window_size=local_window,
        implementation=implementation,
    )


def self_attention(
    spec: ModelSpec,
    q_BLNH: jnp.ndarray,
    k_BLKH: jnp.ndarray,
    v_BLKV: jnp.ndarray,
    segment_BL: jnp.ndarray | None,
    scale: float,
    kind: AttentionKind | None = None,
    sinks_N: jnp.ndarray | None = None,
) -> jnp.ndarray:
    """Causal attention of a sequence to itself, [B, L, N, V], by `spec.attention_impl`.

    q [B, L, N, H], k [B, L, K, H], v [B, L, K, V] with K dividing N; tokens attend within
    the kind's sliding window or chunk (default: `spec.sliding_window`; 0: all earlier
    tokens) and, given `segment_BL`, their own document; `sinks_N` adds one logit per head to
    every softmax denominator.
    """
    kind = kind or AttentionKind(window=spec.sliding_window)
    window, chunk, cap = kind.window, kind.chunk, spec.attn_logit_softcap
    if spec.attention_impl == "dot":
        index_BL = jnp.broadcast_to(jnp.arange(q_BLNH.shape[1]), q_BLNH.shape[:2])
        mask_BLS = attention_mask(
            index_BL,
            index_BL,
            window=window,
            chunk=chunk,
            q_segment_BL=segment_BL,
            kv_segment_BS=segment_BL,
        )
        return masked_softmax_attention(
            q_BLNH, k_BLKH, v_BLKV, mask_BLS, scale, sinks_N, softcap=cap
        )
    if _use_cudnn(spec, q_BLNH, v_BLKV, segment_BL, kind, sinks_N is not None):
        if segment_BL is not None:
            raise ValueError(
                "model.attention_impl='cudnn' cannot keep documents apart "
                "(data.reset_attention_mask=True); use 'blockwise' or 'auto'."
            )
        return fused_attention(q_BLNH, k_BLKH, v_BLKV, scale, window, "cudnn")
    block = attention_block_size(spec, q_BLNH.shape[1])
    return blockwise_causal_attention(
        q_BLNH,
        k_BLKH,
        v_BLKV,
        segment_BL,
        window,
        scale,
        block,
        chunk=chunk,
        sinks_N=sinks_N,
        softcap=cap,
    )


def attention_block_size(spec: ModelSpec, length: int) -> int:
    """Queries per block of the blockwise kernel: `model.attention_block`, or when it is 0, the
    backend's choice for this length (see `jaxtrain.hardware.backend`)."""
    if spec.attention_block:
        return spec.attention_block
    return backend.current().block_for(length)


def masked_softmax_attention(
    q_BLNH: jnp.ndarray,
    k_BSKH: jnp.ndarray,
    v_BSKH: jnp.ndarray,
    mask_BLS: jnp.ndarray,
    scale: float,
    sinks_N: jnp.ndarray | None = None,
    *,
    softcap: float = 0.0,
) -> jnp.ndarray:
    """softmax(scale x q k^T [soft-capped], masked [, sink]) v with float32 scores, by autodiff.

    A sink is one more logit per query head in the denominator whose value row is zero.
    """
    b, l, n, h = q_BLNH.shape
    k = k_BSKH.shape[2]
    q_BLKGH = q_BLNH.reshape(b, l, k, n // k, h)
    scores_BKGLS = jnp.einsum(
        "blkgh,bskh->bkgls",
        *float32_operands(q_BLKGH, k_BSKH.astype(q_BLNH.dtype)),
        preferred_element_type=jnp.float32,
    )
    scores_BKGLS = scores_BKGLS * scale
    if softcap:
        scores_BKGLS = _softcap(scores_BKGLS, softcap)
    scores_BKGLS = jnp.where(mask_BLS[:, None, None], scores_BKGLS, _MASKED)
    if sinks_N is None:
        probs_BKGLS = jax.nn.softmax(scores_BKGLS, axis=-1).astype(v_BSKH.dtype)
    else:
        sink_BKGL1 = jnp.broadcast_to(
            sinks_N.astype(jnp.float32).reshape(1, k, n // k, 1, 1), (*scores_BKGLS.shape[:-1], 1)
        )
        both = jax.nn.softmax(jnp.concatenate([scores_BKGLS, sink_BKGL1], axis=-1), axis=-1)
        probs_BKGLS = both[..., :-1].astype(v_BSKH.dtype)
    out_BLKGH = jnp.einsum("bkgls,bskh->blkgh", probs_BKGLS, v_BSKH)
    return out_BLKGH.reshape(b, l, n, -1)


def cached_attention(
    q_BLNH: jnp.ndarray,
    k_BLKH: jnp.ndarray,
    v_BLKV: jnp.ndarray,
    cache: tuple[jnp.ndarray, jnp.ndarray],
    index_BL: jnp.ndarray,
    scale: float,
    *,
    window: int = 0,
    chunk: int = 0,
    sinks_N: jnp.ndarray | None = None,
    softcap: float = 0.0,
) -> tuple[jnp.ndarray, tuple[jnp.ndarray, jnp.ndarray]]:
    """Decoding: writes this chunk's keys/values at its slots of `cache` ([B, S, K, H] each)
    and attends to every filled slot; returns (output [B, L, N, V], updated cache). Every row
    of a batch decodes in lockstep, so the chunk starts at the same slot in each."""
    cache_k, cache_v = cache
    start = index_BL[0, 0]
    k_BSKH = jax.lax.dynamic_update_slice_in_dim(
        cache_k, k_BLKH.astype(cache_k.dtype), start, axis=1
    )
    v_BSKV = jax.lax.dynamic_update_slice_in_dim(
        cache_v, v_BLKV.astype(cache_v.dtype), start, axis=1
    )
    s = k_BSKH.shape[1]
    kv_index_BS = jnp.broadcast_to(jnp.arange(s), (q_BLNH.shape[0], s))
    mask_BLS = attention_mask(
        index_BL,
        kv_index_BS,
        window=window,
        chunk=chunk,
        kv_valid_BS=kv_index_BS <= index_BL[:, -1:],
    )
    out_BLNV = masked_softmax_attention(
        q_BLNH, k_BSKH, v_BSKV, mask_BLS, scale, sinks_N, softcap=softcap
    )
    return out_BLNV, (k_BSKH, v_BSKV)


def temperature(index_BL: jnp.ndarray, floor_scale: float, attn_scale: float) -> jnp.ndarray:
    """Llama 4's query scale on NoPE layers, [B, L]: 1 + attn_scale x log1p(floor((i + 1) /
    floor_scale)), growing with the token's slot i so long contexts keep attention sharp."""
    steps = jnp.floor((index_BL.astype(jnp.float32) + 1.0) / floor_scale)
    return jnp.log1p(steps) * attn_scale + 1.0


def log_temperature(index_BL: jnp.ndarray, length: int) -> jnp.ndarray:
    """Grok-2's query scale, [B, L]: log2(i) / log2(length) for a token at slot i > length, 1
    before (scaling the query scales its scores before the soft-cap, as xAI's kernels do)."""
    i = index_BL.astype(jnp.float32)
    return jnp.where(
        index_BL > length, jnp.log2(jnp.maximum(i, 1.0)) / jnp.log2(float(length)), 1.0
    )


def l2_norm(x: jnp.ndarray, eps: float) -> jnp.ndarray:
    """RMS norm without a weight, in float32 (Llama 4's qk-norm)."""
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)).astype(x.dtype)


class Attention(nnx.Module):
    """Multi-head attention where K kv heads each serve G = N / K query heads."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        self.spec = spec
        self.kinds = attention_kinds(spec)[0]
        d, n, k, h = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim
        common = dict(
            rngs=rngs,
            std=spec.init_std,
            dtype=spec.jnp_dtype,
            param_dtype=spec.jnp_param_dtype,
            fp8=fp8.recipe(spec),
        )
        self.q_proj = Dense(
            (d,), (n, h), ("embed",), ("heads", "head_dim"), use_bias=spec.qkv_bias, **common
        )
        self.k_proj = Dense(
            (d,), (k, h), ("embed",), ("kv_heads", "head_dim"), use_bias=spec.qkv_bias, **common
        )
        self.v_proj = Dense(
            (d,), (k, h), ("embed",), ("kv_heads", "head_dim"), use_bias=spec.qkv_bias, **common
        )
        self.o_proj = Dense(
            (n, h), (d,), ("heads", "head_dim"), ("embed",), use_bias=spec.o_bias, **common
        )
        if spec.attn_output_gate:  # Qwen3-Next: only then, so others keep their tree
            self.gate_proj = Dense((d,), (n, h), ("embed",), ("heads", "head_dim"), **common)
        if spec.qk_norm:
            norm = dict(
                dtype=spec.jnp_dtype,
                param_dtype=spec.jnp_param_dtype,
                zero_centered=spec.norm_zero_centered,
            )
            if spec.qk_norm_across_heads:  # OLMo: one norm over all heads' q (and k)
                self.q_norm = RMSNorm(
                    (n, h), spec.norm_eps, axis_name=("heads", "head_dim"), **norm
                )
                self.k_norm = RMSNorm(
                    (k, h), spec.norm_eps, axis_name=("kv_heads", "head_dim"), **norm
                )
            else:
                self.q_norm = RMSNorm(h, spec.norm_eps, axis_name="head_dim", **norm)
                self.k_norm = RMSNorm(h, spec.norm_eps, axis_name="head_dim", **norm)
        else:
            self.q_norm = self.k_norm = None
        if spec.attention_sinks:  # only then, so other families keep their parameter tree
            self.sinks = make_sinks(spec, rngs)

    def __call__(
        self,
        x_BLD: jnp.ndarray,
        cos_BLH: jnp.ndarray,
        sin_BLH: jnp.ndarray,
        index_BL: jnp.ndarray,
        segment_BL: jnp.ndarray | None = None,
        cache: tuple[jnp.ndarray, jnp.ndarray] | None = None,
        kind: jnp.ndarray | int = 0,
    ) -> tuple[jnp.ndarray, tuple[jnp.ndarray, jnp.ndarray] | None]:
        """Attends x to itself, or to the cache it is appended to when `cache` is given.

        `index_BL` is each token's index in its row (its slot in the cache when decoding);
        causality, windows, chunks and the NoPE temperature use it, RoPE uses the positions
        behind cos/sin. `kind` indexes this block's `AttentionKind` (a traced per-layer value
        inside the scanned stack).
        """
        q_BLNH = sharding.constrain(
            self.q_proj(x_BLD), ("activation_batch", "activation_length", "activation_heads", None)
        )
        kv_axes = ("activation_batch", "activation_length", "activation_kv_heads", None)
        k_BLKH = sharding.constrain(self.k_proj(x_BLD), kv_axes)
        v_BLKH = sharding.constrain(self.v_proj(x_BLD), kv_axes)
        if self.q_norm is not None:
            q_BLNH, k_BLKH = self.q_norm(q_BLNH), self.k_norm(k_BLKH)
        sinks_N = self.sinks[...] if hasattr(self, "sinks") else None
        operands = (q_BLNH, k_BLKH, v_BLKH, sinks_N, cos_BLH, sin_BLH, index_BL, segment_BL, cache)
        branches = [self._attend_fn(k) for k in self.kinds]
        if len(branches) == 1:
            out_BLNH, new_cache = branches[0](*operands)
        else:
            out_BLNH, new_cache = jax.lax.switch(kind, branches, *operands)
        out_BLNH = sharding.constrain(
            out_BLNH.astype(self.spec.jnp_dtype),
            ("activation_batch", "activation_length", "activation_heads", None),
        )
        if hasattr(self, "gate_proj"):  # the gate lets a head pass nothing (no sink needed)
            gate_BLNH = jax.nn.sigmoid(self.gate_proj(x_BLD).astype(jnp.float32))
            out_BLNH = (out_BLNH.astype(jnp.float32) * gate_BLNH).astype(self.spec.jnp_dtype)
        return self.o_proj(out_BLNH), new_cache

    def _attend_fn(self, kind: AttentionKind):
        """The attention of one static kind, from projected q/k/v to [B, L, N, H] (+ cache)."""
        spec = self.spec
        rotate = apply_rope_interleaved if spec.rope_interleave else apply_rope
        scale = (spec.query_pre_attn_scalar or spec.head_dim) ** -0.5

        def attend(q_BLNH, k_BLKH, v_BLKH, sinks_N, cos_BLH, sin_BLH, index_BL, segment_BL, cache):
            if spec.rope_local_theta:  # the tables hold [global | local] angles, see rope.py
                half = cos_BLH.shape[-1] // 2
                part = slice(half, None) if kind.local_rope else slice(None, half)
                cos_BLH, sin_BLH = cos_BLH[..., part], sin_BLH[..., part]
            if kind.rope:
                q_BLNH = rotate(q_BLNH, cos_BLH, sin_BLH)
                k_BLKH = rotate(k_BLKH, cos_BLH, sin_BLH)
            if kind.qk_l2:
                q_BLNH, k_BLKH = l2_norm(q_BLNH, spec.norm_eps), l2_norm(k_BLKH, spec.norm_eps)
            if kind.temperature:
                t_BL = temperature(index_BL, spec.attn_floor_scale, spec.attn_scale)
                q_BLNH = (q_BLNH * t_BL[:, :, None, None]).astype(q_BLNH.dtype)
            if spec.attn_temperature_len:
                t_BL = log_temperature(index_BL, spec.attn_temperature_len)
                q_BLNH = (q_BLNH * t_BL[:, :, None, None]).astype(q_BLNH.dtype)
            if cache is None:
                return self_attention(
                    spec, q_BLNH, k_BLKH, v_BLKH, segment_BL, scale, kind, sinks_N
                ), None
            out_BLNH, cache = cached_attention(
                q_BLNH,
                k_BLKH,
                v_BLKH,
                cache,
                index_BL,
                scale,
                window=kind.window,
                chunk=kind.chunk,
                sinks_N=sinks_N,
                softcap=spec.attn_logit_softcap,
            )
            return out_BLNH.astype(q_BLNH.dtype), cache

        return attend


def make_sinks(spec: ModelSpec, rngs: nnx.Rngs) -> nnx.Param:
    """One sink logit per query head (drawn like the weights, as transformers does)."""
    return make_param(rngs, (spec.num_heads,), ("heads",), spec.init_std, spec.jnp_param_dtype)
