"""Grouped-query causal self-attention with RoPE, optional qkv bias, qk-norm, sliding window,
document (segment) masking and a key/value cache for decoding.

Shape letters: B batch, L query length, S key length, D embed, N query heads, K kv heads,
G query heads per kv head (N = K x G), H head dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtrain import sharding
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

        kv_valid_BS = None
        if cache is None:
            k_BSKH, v_BSKH, kv_index_BS, kv_segment_BS = k_BLKH, v_BLKH, index_BL, segment_BL
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
            kv_valid_BS = kv_index_BS <= index_BL[:, -1:]
            kv_segment_BS = None
            segment_BL = None

        b, l, n, h = q_BLNH.shape
        k = k_BSKH.shape[2]
        q_BLKGH = q_BLNH.reshape(b, l, k, n // k, h)
        scores_BKGLS = jnp.einsum("blkgh,bskh->bkgls", q_BLKGH, k_BSKH.astype(q_BLNH.dtype),
                                  preferred_element_type=jnp.float32)
        scores_BKGLS = scores_BKGLS * (h**-0.5)
        mask_BLS = attention_mask(index_BL, kv_index_BS, window=spec.sliding_window,
                                  kv_valid_BS=kv_valid_BS, q_segment_BL=segment_BL,
                                  kv_segment_BS=kv_segment_BS)
        scores_BKGLS = jnp.where(mask_BLS[:, None, None], scores_BKGLS, _MASKED)
        probs_BKGLS = jax.nn.softmax(scores_BKGLS, axis=-1).astype(v_BSKH.dtype)
        out_BLKGH = jnp.einsum("bkgls,bskh->blkgh", probs_BKGLS, v_BSKH)
        out_BLNH = out_BLKGH.reshape(b, l, n, h).astype(spec.jnp_dtype)
        out_BLNH = sharding.constrain(out_BLNH, (
            "activation_batch", "activation_length", "activation_heads", None))
        return self.o_proj(out_BLNH), new_cache
