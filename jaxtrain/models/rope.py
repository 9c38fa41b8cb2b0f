"""Rotary position embeddings in the half-split layout that Hugging Face Llama/Qwen/Mistral use.

Shape letters: B batch, L sequence, N heads, H head dim.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxtrain.models.spec import ModelSpec


def inverse_frequencies(spec: ModelSpec) -> np.ndarray:
    """The per-pair rotation frequencies, with Llama 3 or linear context scaling applied."""
    exponents = np.arange(0, spec.head_dim, 2, dtype=np.float64) / spec.head_dim
    inv_freq = 1.0 / (spec.rope_theta**exponents)
    if spec.rope_scaling == "linear":
        inv_freq = inv_freq / spec.rope_factor
    elif spec.rope_scaling == "llama3":
        # Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, the band between
        # blended smoothly, so the model keeps its local resolution at a longer context.
        old_len = spec.rope_original_max_len
        low_wavelen = old_len / spec.rope_low_freq_factor
        high_wavelen = old_len / spec.rope_high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > low_wavelen, inv_freq / spec.rope_factor, inv_freq)
        smooth = (old_len / wavelen - spec.rope_low_freq_factor) / (
            spec.rope_high_freq_factor - spec.rope_low_freq_factor)
        blended = (1 - smooth) * scaled / spec.rope_factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv_freq = np.where(medium, blended, scaled)
    return inv_freq.astype(np.float32)


def rope_angles(spec: ModelSpec, positions_BL: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """cos and sin tables of shape [B, L, H] for integer positions."""
    inv_freq = jnp.asarray(inverse_frequencies(spec))
    angles_BLh = positions_BL.astype(jnp.float32)[..., None] * inv_freq
    angles_BLH = jnp.concatenate([angles_BLh, angles_BLh], axis=-1)
    return jnp.cos(angles_BLH), jnp.sin(angles_BLH)


def apply_rope(x_BLNH: jnp.ndarray, cos_BLH: jnp.ndarray, sin_BLH: jnp.ndarray) -> jnp.ndarray:
    """Rotates each (i, i + H/2) pair of x by the position's angle, in float32."""
    x = x_BLNH.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    cos, sin = cos_BLH[:, :, None, :], sin_BLH[:, :, None, :]
    return (x * cos + rotated * sin).astype(x_BLNH.dtype)
