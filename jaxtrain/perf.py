"""Peak FLOP/s per device for MFU: published dense peaks of accelerators, or measured on CPUs.

MFU = (model FLOPs per token x tokens per second) / (peak FLOP/s per device x devices), with the
FLOPs per token of `ModelSpec.flops_per_token` (6 x matmul parameters + causal attention).
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp

# Dense bf16 peak FLOP/s (no sparsity), from the vendors' data sheets.
PEAK_BF16_FLOPS = {
    "H100": 989e12,
    "H200": 989e12,
    "A100": 312e12,
    "MI300X": 1307e12,
    "MI325X": 1307e12,
    "MI355X": 2500e12,
}


def device_peak_flops(device: jax.Device | None = None) -> float | None:
    """The table's peak for a known accelerator, else None."""
    device = device or jax.devices()[0]
    kind = getattr(device, "device_kind", "").upper()
    for name, peak in PEAK_BF16_FLOPS.items():
        if name in kind.replace(" ", ""):
            return peak
    return None


@functools.cache
def measured_matmul_flops(size: int = 2048, repeats: int = 10) -> float:
    """Achieved FLOP/s of a jitted float32 matmul on one device: the practical CPU peak.

    The best of several runs, so that a momentarily busy machine does not lower the peak (and
    inflate MFU); 2048^3 is large enough to reach the BLAS kernels' steady state.
    """
    device = jax.devices()[0]
    a = jax.device_put(jnp.ones((size, size), jnp.float32), device)
    matmul = jax.jit(lambda x: x @ x)
    matmul(a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def peak_flops(configured: float = 0.0) -> tuple[float, str]:
    """Per-device peak FLOP/s and where the figure comes from."""
    if configured > 0:
        return configured, "train.peak_flops"
    table = device_peak_flops()
    if table:
        return table, f"data sheet ({jax.devices()[0].device_kind})"
    return measured_matmul_flops(), "measured float32 matmul"


def mesh_peak_flops(configured: float, num_devices: int) -> tuple[float, str]:
    """Peak FLOP/s of a whole mesh of `num_devices`, and where the per-device figure comes from.

    Fake CPU devices share the host's cores: the measured CPU peak is already the whole CPU.
    """
    peak, source = peak_flops(configured)
    return (peak if jax.devices()[0].platform == "cpu" else peak * num_devices), source


def mfu(flops_per_token: float, tokens_per_s: float, configured_peak: float,
        num_devices: int) -> float:
    """Model FLOPs utilisation, a fraction: achieved model FLOP/s over the mesh's peak."""
    return flops_per_token * tokens_per_s / mesh_peak_flops(configured_peak, num_devices)[0]
