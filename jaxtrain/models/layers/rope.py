"""Rotary position embeddings: the half-split layout Hugging Face Llama/Qwen/Mistral use, and the
interleaved-pair layout of DeepSeek's latent attention; default, linear, Llama 3 and YaRN scaling.

Shape letters: B batch, L sequence, N heads, H rotary dims (head_dim, or MLA's qk_rope_head_dim).
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from jaxtrain.models.spec.hyperparameters import ModelSpec


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature term 0.1 x mscale x ln(factor) + 1 (1 when not extending)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def attention_factor(spec: ModelSpec) -> float:
    """What YaRN multiplies cos and sin by (so q.k of the rotary dims by its square); 1 otherwise.

    With both mscales set (DeepSeek) it is their ratio, 1 when they are equal; otherwise the
    paper's 0.1 ln(factor) + 1.
    """
    if spec.rope_scaling != "yarn":
        return 1.0
    if spec.rope_mscale and spec.rope_mscale_all_dim:
        return yarn_mscale(spec.rope_factor, spec.rope_mscale) / yarn_mscale(
            spec.rope_factor, spec.rope_mscale_all_dim
        )
    return yarn_mscale(spec.rope_factor)


def _yarn(spec: ModelSpec, inv_freq: np.ndarray) -> np.ndarray:
    """YaRN: pairs turning more than beta_fast times over the original context keep their
    frequency, those turning fewer than beta_slow times are slowed by `factor`, and a linear
    ramp over the pair indices between (rounded to whole pairs when `rope_truncate`) blends
    the two."""
    dim, base, old_len = spec.rope_dim, spec.rope_theta, spec.rope_original_max_len

    def pair_index(rotations: float) -> float:
        # The dimension whose wavelength fits `rotations` times into the original context.
        return dim * math.log(old_len / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_index(spec.rope_beta_fast), pair_index(spec.rope_beta_slow)
    if spec.rope_truncate:  # gpt-oss keeps the fractional ends
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # a zero-width ramp would divide by zero
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    return inv_freq / spec.rope_factor * ramp + inv_freq * (1 - ramp)


def inverse_frequencies(spec: ModelSpec) -> np.ndarray:
    """The per-pair rotation frequencies, with linear, Llama 3 or YaRN context scaling applied."""
    exponents = np.arange(0, spec.rope_dim, 2, dtype=np.float64) / spec.rope_dim
    inv_freq = 1.0 / (spec.rope_theta**exponents)
    if spec.rope_scaling == "yarn":
        inv_freq = _yarn(spec, inv_freq)
    elif spec.rope_scaling == "linear":
        inv_freq = inv_freq / spec.rope_factor
    elif spec.rope_scaling == "llama3":
        # Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, the band between
        # blended smoothly, so the model keeps its local resolution at a longer context.
        old_len = spec.rope_original_max_len
        low_wavelen = old_len / spec.rope_low_freq_factor
        high_wavelen = old_len / spec.rope_high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > low_wavelen, inv_freq / spec.rope_factor, inv_freq)
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        # Equal factors (Llama 4 Scout) leave no band to blend over: a hard cut.
        band = spec.rope_high_freq_factor - spec.rope_low_freq_factor
        if band:
            smooth = (old_len / wavelen - spec.rope_low_freq_factor) / band
            blended = (1 - smooth) * scaled / spec.rope_factor + smooth * scaled
            inv_freq = np.where(medium, blended, scaled)
        else:
            inv_freq = scaled
    return inv_freq.astype(np.float32)


def local_spec(spec: ModelSpec) -> ModelSpec:
    """The spec whose rotary tables the sliding-window blocks use: base `rope_local_theta`, no
    context scaling (Gemma 3 scales only its global blocks)."""
    return dataclasses.replace(
        spec,
        rope_theta=spec.rope_local_theta,
        rope_scaling="none",
        rope_factor=1.0,
        rope_local_theta=0.0,
    )


def rope_angles(spec: ModelSpec, positions_BL: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """cos and sin tables of shape [B, L, H] for integer positions (each pair's angle twice:
    [a_0 .. a_H/2-1, a_0 .. a_H/2-1]), times YaRN's attention factor when it applies.

    With `rope_local_theta` the tables are [B, L, 2H], the global angles then the local ones:
    one pair of arrays keeps every path that carries them (scans, pipeline stages) unchanged,
    and each attention block takes its half.
    """
    if spec.rope_local_theta:
        glob, local = (
            rope_angles(_global_spec(spec), positions_BL),
            rope_angles(local_spec(spec), positions_BL),
        )
        return tuple(jnp.concatenate(pair, axis=-1) for pair in zip(glob, local))
    inv_freq = jnp.asarray(inverse_frequencies(spec))
    angles_BLh = positions_BL.astype(jnp.float32)[..., None] * inv_freq
    angles_BLH = jnp.concatenate([angles_BLh, angles_BLh], axis=-1)
    scale = attention_factor(spec)
    if scale == 1.0:
        return jnp.cos(angles_BLH), jnp.sin(angles_BLH)
    return jnp.cos(angles_BLH) * scale, jnp.sin(angles_BLH) * scale


def rope_angles_for_length(spec: ModelSpec, length: int) -> tuple[np.ndarray, np.ndarray]:
    """`rope_angles` for positions 0 .. length-1 as host constants of shape [1, L, H].

    Why constants: XLA fuses a traced cos/sin into every consumer, and each consumer is a
    [B, L, N, H] tensor, so the transcendentals ran once per head and batch row in every RoPE
    of the forward and backward pass (3% of a CPU step). The angles are the same float32
    products as `rope_angles`; cos and sin are taken in float64 and rounded once.
    """
    if spec.rope_local_theta:
        glob = rope_angles_for_length(_global_spec(spec), length)
        local = rope_angles_for_length(local_spec(spec), length)
        return tuple(np.concatenate(pair, axis=-1) for pair in zip(glob, local))
    inv_freq = inverse_frequencies(spec)
    angles_Lh = np.arange(length, dtype=np.float32)[:, None] * inv_freq
    angles_LH = np.concatenate([angles_Lh, angles_Lh], axis=-1).astype(np.float64)
    scale = attention_factor(spec)
    cos_LH = (np.cos(angles_LH) * scale).astype(np.float32)
    sin_LH = (np.sin(angles_LH) * scale).astype(np.float32)
    return cos_LH[None], sin_LH[None]


def _global_spec(spec: ModelSpec) -> ModelSpec:
    return dataclasses.replace(spec, rope_local_theta=0.0)


def apply_rope(x_BLNH: jnp.ndarray, cos_BLH: jnp.ndarray, sin_BLH: jnp.ndarray) -> jnp.ndarray:
    """Rotates each (i, i + H/2) pair of x by the position's angle, in float32. Tables
    narrower than the head turn its first dims only and pass the rest through (Qwen3-Next's
    partial rotary embedding, as transformers lays it out)."""
    rotary = cos_BLH.shape[-1]
    if rotary < x_BLNH.shape[-1]:
        turned = apply_rope(x_BLNH[..., :rotary], cos_BLH, sin_BLH)
        return jnp.concatenate([turned, x_BLNH[..., rotary:]], axis=-1)
    x = x_BLNH.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    cos, sin = cos_BLH[:, :, None, :], sin_BLH[:, :, None, :]
    return (x * cos + rotated * sin).astype(x_BLNH.dtype)


def apply_rope_interleaved(
    x_BLNH: jnp.ndarray, cos_BLH: jnp.ndarray, sin_BLH: jnp.ndarray
) -> jnp.ndarray:
    """Rotates each (2i, 2i + 1) pair of x by pair i's angle (DeepSeek's layout), in float32.

    The result is laid out de-interleaved, [rotated evens, rotated odds]: queries and keys get
    the same permutation, so their dot products equal those of the interleaved result.
    """
    x = x_BLNH.astype(jnp.float32)
    half = x.shape[-1] // 2
    cos, sin = cos_BLH[:, :, None, :half], sin_BLH[:, :, None, :half]
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = jnp.concatenate([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
    return rotated.astype(x_BLNH.dtype)
