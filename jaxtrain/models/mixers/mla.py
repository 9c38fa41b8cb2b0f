"""Multi-head latent attention (DeepSeek V2/V3): keys and values come from one low-rank latent
per token, queries optionally from another, and a small rotary key is shared by all heads.

Shape letters: B batch, L query length, S key length, D embed, N heads, R kv latent
(kv_lora_rank), C q latent (q_lora_rank), P rotary dims (qk_rope_head_dim), W kv latent plus
rotary key (R + P), Q query/key head width (qk_nope_head_dim + P), V value head width, X per-head
key-without-rope plus value width (qk_nope_head_dim + V).

Per token: latent = norm(x W_kva[:R]), k_rot = rope(x W_kva[R:]) (one head, shared);
k_nope, v = split(latent W_kvb) per head; q = x W_q or norm(x W_qa) W_qb per head, its last P
dims rotated. Rotary pairs are interleaved (2i, 2i + 1) in DeepSeek's checkpoints
(`rope_interleave`); the two latent norms use epsilon 1e-6 whatever `norm_eps`, as DeepSeek's
code and transformers do.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from jaxtrain.models.layers import fp8
from jaxtrain.models.layers.basic import Dense, RMSNorm
from jaxtrain.models.layers.rope import apply_rope, apply_rope_interleaved, yarn_mscale
from jaxtrain.models.mixers.attention import cached_attention, self_attention
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.parallel import sharding

_LATENT_EPS = 1e-6
_HEADS = ("activation_batch", "activation_length", "activation_heads", None)


def softmax_scale(spec: ModelSpec) -> float:
    """1 / sqrt(Q), times YaRN's mscale(factor, mscale_all_dim)^2 when DeepSeek sets it: the
    longer context's flatter attention is sharpened again."""
    scale = (spec.qk_nope_head_dim + spec.qk_rope_head_dim) ** -0.5
    if spec.rope_scaling == "yarn" and spec.rope_mscale_all_dim:
        scale *= yarn_mscale(spec.rope_factor, spec.rope_mscale_all_dim) ** 2
    return scale


class MLAttention(nnx.Module):
    """Causal multi-head latent attention with an optional key/value cache for decoding.

    The cache holds each head's full keys [B, S, N, Q] and values [B, S, N, V], not the
    compressed latent: simpler, and decoding then skips re-expanding the latent of every past
    token, at the cost of the memory saving MLA's latent cache would give.
    """

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        self.spec = spec
        d, n, p = spec.hidden_size, spec.num_heads, spec.qk_rope_head_dim
        r, c = spec.kv_lora_rank, spec.q_lora_rank
        q_width = spec.qk_nope_head_dim + p
        common = dict(
            rngs=rngs,
            std=spec.init_std,
            dtype=spec.jnp_dtype,
            param_dtype=spec.jnp_param_dtype,
            fp8=fp8.recipe(spec),
        )
        norm = dict(dtype=spec.jnp_dtype, param_dtype=spec.jnp_param_dtype)
        heads = ("heads", "head_dim")
        # Only the attributes in use exist, so the parameter tree matches the checkpoint's.
        if c:
            self.q_a_proj = Dense((d,), (c,), ("embed",), ("latent",), **common)
            self.q_a_norm = RMSNorm(c, _LATENT_EPS, **norm)
            self.q_b_proj = Dense((c,), (n, q_width), ("latent",), heads, **common)
        else:
            self.q_proj = Dense((d,), (n, q_width), ("embed",), heads, **common)
        self.kv_a_proj = Dense((d,), (r + p,), ("embed",), ("latent",), **common)
        self.kv_a_norm = RMSNorm(r, _LATENT_EPS, **norm)
        self.kv_b_proj = Dense(
            (r,), (n, spec.qk_nope_head_dim + spec.v_head_dim), ("latent",), heads, **common
        )
        self.o_proj = Dense((n, spec.v_head_dim), (d,), heads, ("embed",), **common)

    def _queries(self, x_BLD: jnp.ndarray) -> jnp.ndarray:
        if hasattr(self, "q_proj"):
            return self.q_proj(x_BLD)
        return self.q_b_proj(self.q_a_norm(self.q_a_proj(x_BLD)))

    def __call__(
        self,
        x_BLD: jnp.ndarray,
        cos_BLP: jnp.ndarray,
        sin_BLP: jnp.ndarray,
        index_BL: jnp.ndarray,
        segment_BL: jnp.ndarray | None = None,
        cache: tuple[jnp.ndarray, jnp.ndarray] | None = None,
    ) -> tuple[jnp.ndarray, tuple[jnp.ndarray, jnp.ndarray] | None]:
        """Attends x to itself, or to the cache it is appended to, as `Attention` does."""
        spec = self.spec
        nope, r = spec.qk_nope_head_dim, spec.kv_lora_rank
        rotate = apply_rope_interleaved if spec.rope_interleave else apply_rope
        q_BLNQ = sharding.constrain(self._queries(x_BLD), _HEADS)
        q_BLNQ = jnp.concatenate(
            [q_BLNQ[..., :nope], rotate(q_BLNQ[..., nope:], cos_BLP, sin_BLP)], axis=-1
        )

        kv_a_BLW = self.kv_a_proj(x_BLD)
        kv_BLNX = sharding.constrain(self.kv_b_proj(self.kv_a_norm(kv_a_BLW[..., :r])), _HEADS)
        k_rot_BL1P = rotate(kv_a_BLW[..., None, r:], cos_BLP, sin_BLP)
        b, l, n, _ = kv_BLNX.shape
        k_rot_BLNP = jnp.broadcast_to(k_rot_BL1P, (b, l, n, k_rot_BL1P.shape[-1]))
        k_BLNQ = jnp.concatenate([kv_BLNX[..., :nope], k_rot_BLNP.astype(kv_BLNX.dtype)], -1)
        v_BLNV = kv_BLNX[..., nope:]

        if cache is None:
            out_BLNV = self_attention(spec, q_BLNQ, k_BLNQ, v_BLNV, segment_BL, softmax_scale(spec))
        else:
            out_BLNV, cache = cached_attention(
                q_BLNQ, k_BLNQ, v_BLNV, cache, index_BL, softmax_scale(spec)
            )
        out_BLNV = sharding.constrain(out_BLNV.astype(spec.jnp_dtype), _HEADS)
        return self.o_proj(out_BLNV), cache
