"""Grouped-query causal self-attention with RoPE, optional qkv bias, qk-norm, sliding window,
document (segment) masking and a key/value cache for decoding.

Training (no cache) runs the implementation `model.attention_impl` picks (see
`self_attention`); decoding with a cache uses the plain masked softmax below.

Shape letters: B batch, L query length, S key length, D embed, N query heads, K kv heads,
G query heads per kv head (N = K x G), H head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain import sharding
from jaxtrain.models.blockwise_attention import blockwise_causal_attention
from jaxtrain.models.layers import Dense, RMSNorm
from jaxtrain.models.rope import apply_rope
from jaxtrain.models.spec import ModelSpec

_MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)


def attention_mask(q_index_BL: jnp.ndarray, kv_index_BS: jnp.ndarray, *, window: int,
                   kv_valid_BS: jnp.ndarray | None = None,
                   q_segment_BL: jnp.ndarray | None = None,
                   kv_segment_BS: jnp.ndarray | None = None) -> jnp.ndarray:
    """Boolean [B, L, S]: causal by token index, inside the window, same document, filled slot."""
    q, kv = q_index_BL[:, :, None], kv_index_BS[:, None, :]
    allowed = kv <= q
    if window:
        allowed &= q - kv < window
    if kv_valid_BS is not None:
        allowed &= kv_valid_BS[:, None, :]
    if q_segment_BL is not None and kv_segment_BS is not None:
        allowed &= q_segment_BL[:, :, None] == kv_segment_BS[:, None, :]
    return allowed


def _use_cudnn(spec: ModelSpec, q_BLNH: jnp.ndarray, v_BLKV: jnp.ndarray,
               segment_BL: jnp.ndarray | None) -> bool:
    """Whether training attention goes through cuDNN's fused kernel."""
    if spec.attention_impl != "auto":
        return spec.attention_impl == "cudnn"
    # Where the kernel applies: NVIDIA GPUs, half-precision inputs, equal query and value head
    # dims it supports, and no per-token document masks (which jax's cuDNN entry point cannot
    # express).
    device = jax.devices()[0]
    head_dim = q_BLNH.shape[-1]
    return (segment_BL is None and spec.dtype in ("bfloat16", "float16")
            and device.platform == "gpu" and device.device_kind.startswith("NVIDIA")
            and head_dim == v_BLKV.shape[-1] and head_dim <= 128 and head_dim % 8 == 0)


def fused_attention(q_BLNH: jnp.ndarray, k_BLKH: jnp.ndarray, v_BLKH: jnp.ndarray,
                    scale: float, window: int, implementation: str | None) -> jnp.ndarray:
    """Causal attention through `jax.nn.dot_product_attention` ("cudnn", or "xla")."""
    local_window = (window - 1, 0) if window else None
    return jax.nn.dot_product_attention(q_BLNH, k_BLKH, v_BLKH, scale=scale, is_causal=True,
                                        local_window_size=local_window,
                                        implementation=implementation)


def self_attention(spec: ModelSpec, q_BLNH: jnp.ndarray, k_BLKH: jnp.ndarray,
                   v_BLKV: jnp.ndarray, segment_BL: jnp.ndarray | None,
                   scale: float) -> jnp.ndarray:
    """Causal attention of a sequence to itself, [B, L, N, V], by `spec.attention_impl`.

    q [B, L, N, H], k [B, L, K, H], v [B, L, K, V] with K dividing N; tokens attend within
    `spec.sliding_window` (0: all earlier tokens) and, given `segment_BL`, their own document.
    """
    window = spec.sliding_window
    if spec.attention_impl == "dot":
        index_BL = jnp.broadcast_to(jnp.arange(q_BLNH.shape[1]), q_BLNH.shape[:2])
        mask_BLS = attention_mask(index_BL, index_BL, window=window, q_segment_BL=segment_BL,
                                  kv_segment_BS=segment_BL)
        return masked_softmax_attention(q_BLNH, k_BLKH, v_BLKV, mask_BLS, scale)
    if _use_cudnn(spec, q_BLNH, v_BLKV, segment_BL):
        if segment_BL is not None:
            raise ValueError("model.attention_impl='cudnn' cannot keep documents apart "
                             "(data.reset_attention_mask=True); use 'blockwise' or 'auto'.")
        return fused_attention(q_BLNH, k_BLKH, v_BLKV, scale, window, "cudnn")
    return blockwise_causal_attention(q_BLNH, k_BLKH, v_BLKV, segment_BL, window, scale,
                                      spec.attention_block)


def masked_softmax_attention(q_BLNH: jnp.ndarray, k_BSKH: jnp.ndarray, v_BSKH: jnp.ndarray,
                             mask_BLS: jnp.ndarray, scale: float) -> jnp.ndarray:
    """softmax(scale x q k^T masked) v with float32 scores, differentiated by autodiff."""
    b, l, n, h = q_BLNH.shape
    k = k_BSKH.shape[2]
    q_BLKGH = q_BLNH.reshape(b, l, k, n // k, h)
    scores_BKGLS = jnp.einsum("blkgh,bskh->bkgls", q_BLKGH, k_BSKH.astype(q_BLNH.dtype),
                              preferred_element_type=jnp.float32)
    scores_BKGLS = jnp.where(mask_BLS[:, None, None], scores_BKGLS * scale, _MASKED)
    probs_BKGLS = jax.nn.softmax(scores_BKGLS, axis=-1).astype(v_BSKH.dtype)
    out_BLKGH = jnp.einsum("bkgls,bskh->blkgh", probs_BKGLS, v_BSKH)
    return out_BLKGH.reshape(b, l, n, -1)


class Attention(nnx.Module):
    """Multi-head attention where K kv heads each serve G = N / K query heads."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        self.spec = spec
        d, n, k, h = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim
        common = dict(rngs=rngs, std=spec.init_std, dtype=spec.jnp_dtype,
                      param_dtype=spec.jnp_param_dtype)
        self.q_proj = Dense((d,), (n, h), ("embed",), ("heads", "head_dim"),
                            use_bias=spec.qkv_bias, **common)
        self.k_proj = Dense((d,), (k, h), ("embed",), ("kv_heads", "head_dim"),
                            use_bias=spec.qkv_bias, **common)
        self.v_proj = Dense((d,), (k, h), ("embed",), ("kv_heads", "head_dim"),
                            use_bias=spec.qkv_bias, **common)
        self.o_proj = Dense((n, h), (d,), ("heads", "head_dim"), ("embed",), **common)
        if spec.qk_norm:
            norm = dict(axis_name="head_dim", dtype=spec.jnp_dtype,
                        param_dtype=spec.jnp_param_dtype)
            self.q_norm = RMSNorm(h, spec.norm_eps, **norm)
            self.k_norm = RMSNorm(h, spec.norm_eps, **norm)
        else:
            self.q_norm = self.k_norm = None

    def __call__(self, x_BLD: jnp.ndarray, cos_BLH: jnp.ndarray, sin_BLH: jnp.ndarray,
                 index_BL: jnp.ndarray, segment_BL: jnp.ndarray | None = None,
                 cache: tuple[jnp.ndarray, jnp.ndarray] | None = None,
                 ) -> tuple[jnp.ndarray, tuple[jnp.ndarray, jnp.ndarray] | None]:
        """Attends x to itself, or to the cache it is appended to when `cache` is given.

        `index_BL` is each token's index in its row (its slot in the cache when decoding);
        causality and the sliding window use it, RoPE uses the positions behind cos/sin.
        """
        spec = self.spec
        q_BLNH = sharding.constrain(self.q_proj(x_BLD), (
            "activation_batch", "activation_length", "activation_heads", None))
        kv_axes = ("activation_batch", "activation_length", "activation_kv_heads", None)
        k_BLKH = sharding.constrain(self.k_proj(x_BLD), kv_axes)
        v_BLKH = sharding.constrain(self.v_proj(x_BLD), kv_axes)
        if self.q_norm is not None:
            q_BLNH, k_BLKH = self.q_norm(q_BLNH), self.k_norm(k_BLKH)
        q_BLNH = apply_rope(q_BLNH, cos_BLH, sin_BLH)
        k_BLKH = apply_rope(k_BLKH, cos_BLH, sin_BLH)

        if cache is None:
            out_BLNH = self_attention(spec, q_BLNH, k_BLKH, v_BLKH, segment_BL,
                                      spec.head_dim**-0.5)
            new_cache = None
        else:
            # Write this chunk at its slots; every row of a batch decodes in lockstep.
            cache_k, cache_v = cache
            start = index_BL[0, 0]
            k_BSKH = jax.lax.dynamic_update_slice_in_dim(cache_k, k_BLKH.astype(cache_k.dtype),
                                                         start, axis=1)
            v_BSKH = jax.lax.dynamic_update_slice_in_dim(cache_v, v_BLKH.astype(cache_v.dtype),
                                                         start, axis=1)
            new_cache = (k_BSKH, v_BSKH)
            s = k_BSKH.shape[1]
            kv_index_BS = jnp.broadcast_to(jnp.arange(s), (x_BLD.shape[0], s))
            mask_BLS = attention_mask(index_BL, kv_index_BS, window=spec.sliding_window,
                                      kv_valid_BS=kv_index_BS <= index_BL[:, -1:])
            out_BLNH = masked_softmax_attention(q_BLNH, k_BSKH, v_BSKH, mask_BLS,
                                                spec.head_dim**-0.5)
        out_BLNH = sharding.constrain(out_BLNH.astype(spec.jnp_dtype), (
            "activation_batch", "activation_length", "activation_heads", None))
        return self.o_proj(out_BLNH), new_cache
