"""Peak FLOP/s per device for MFU: published dense peaks of accelerators, or measured on CPUs.

MFU = (model FLOPs per token x tokens per second) / (peak FLOP/s per device x devices), with the
FLOPs per token of `ModelSpec.flops_per_token` (6 x matmul parameters + causal attention).
With fp8 matmuls (`model.quantization="fp8"`) the peak is the device's dense fp8 one, twice the
bf16 peak on these GPUs, as Transformer Engine and MaxText report it: all model FLOPs count
against it, although attention and the output layer still run in bf16, so an fp8 run's MFU
reads lower than its bf16 run's at the same step time and higher only where fp8 pays off.
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
# Dense fp8 peak FLOP/s of those that multiply float8 in hardware (the A100 does not).
PEAK_FP8_FLOPS = {
    "H100": 1979e12,
    "H200": 1979e12,
    "MI300X": 2615e12,
    "MI325X": 2615e12,
    "MI355X": 5000e12,
}


def _table_peak(table: dict[str, float], device: jax.Device) -> float | None:
    kind = getattr(device, "device_kind", "").upper().replace(" ", "")
    return next((peak for name, peak in table.items() if name in kind), None)


def device_peak_flops(device: jax.Device | None = None, fp8: bool = False) -> float | None:
    """The table's peak for a known accelerator (its fp8 peak when `fp8` and it has one),
    else None."""
    device = device or jax.devices()[0]
    fp8_peak = _table_peak(PEAK_FP8_FLOPS, device) if fp8 else None
    return fp8_peak or _table_peak(PEAK_BF16_FLOPS, device)


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


def peak_flops(configured: float = 0.0, fp8: bool = False) -> tuple[float, str]:
    """Per-device peak FLOP/s and where the figure comes from (the fp8 peak when `fp8`)."""
    if configured > 0:
        return configured, "train.peak_flops"
    device = jax.devices()[0]
    if fp8 and (peak := _table_peak(PEAK_FP8_FLOPS, device)):
        return peak, f"data sheet ({device.device_kind}, fp8)"
    if peak := _table_peak(PEAK_BF16_FLOPS, device):
        return peak, f"data sheet ({device.device_kind})"
    return measured_matmul_flops(), "measured float32 matmul"


def mesh_peak_flops(configured: float, num_devices: int, fp8: bool = False) -> tuple[float, str]:
    """Peak FLOP/s of a whole mesh of `num_devices`, and where the per-device figure comes from.

    Fake CPU devices share the host's cores: the measured CPU peak is already the whole CPU.
    """
    peak, source = peak_flops(configured, fp8)
    return (peak if jax.devices()[0].platform == "cpu" else peak * num_devices), source


def mfu(
    flops_per_token: float,
    tokens_per_s: float,
    configured_peak: float,
    num_devices: int,
    fp8: bool = False,
) -> float:
    """Model FLOPs utilisation, a fraction: achieved model FLOP/s over the mesh's peak (the
    fp8 peak for an fp8 run)."""
    return flops_per_token * tokens_per_s / mesh_peak_flops(configured_peak, num_devices, fp8)[0]
