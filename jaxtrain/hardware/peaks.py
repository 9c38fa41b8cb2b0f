"""Peak FLOP/s per device for MFU: published dense peaks of accelerators, or measured on CPUs.

MFU = (model FLOPs per token x tokens per second) / (peak FLOP/s per device x devices), with the
FLOPs per token of `ModelSpec.flops_per_token` (6 x matmul parameters + causal attention).
With fp8 matmuls (`model.quantization="fp8"`) the peak is the device's dense fp8 one, twice the
bf16 peak on these GPUs, as Transformer Engine and MaxText report it: all model FLOPs count
against it, although attention and the output layer still run in bf16, so an fp8 run's MFU
reads lower than its bf16 run's at the same step time and higher only where fp8 pays off.

On CPUs the peak is measured, in the precision the run's matmuls take (`matmul_dtype`): a
bfloat16 run on a CPU that multiplies bfloat16 in hardware (AVX512-BF16, AMX; see
`jaxtrain.hardware.backend`) is measured against a bfloat16 matmul, about twice the float32
rate there; where bfloat16 operands are widened to float32 the float32 matmul is the peak.
The measurement counts the CPU time the matmul's threads ran as well as the wall time, so that
other processes sharing the cores do not lower the peak (and lift MFU above what the hardware
can do).
"""

from __future__ import annotations

import functools
import os
import time

import jax
import jax.numpy as jnp

# Dense bf16 peak FLOP/s (no sparsity), from the vendors' data sheets.
PEAK_BF16_FLOPS = {
    "H100": 989e12,
    "H200": 989e12,
    "A100": 312e12,
    "B200": 2250e12,
    "MI300X": 1307e12,
    "MI325X": 1307e12,
    "MI355X": 2500e12,
}
# Dense fp8 peak FLOP/s of those that multiply float8 in hardware (the A100 does not).
PEAK_FP8_FLOPS = {
    "H100": 1979e12,
    "H200": 1979e12,
    "B200": 4500e12,
    "MI300X": 2615e12,
    "MI325X": 2615e12,
    "MI355X": 5000e12,
}


def kind_in(names, device_kind: str) -> str | None:
    """The first of `names` (a table's kinds: "H100", "MI300X") that a device kind as jax
    names it ("NVIDIA H100 80GB HBM3", "AMD Instinct MI300X") contains, or None."""
    kind = device_kind.upper().replace(" ", "")
    return next((name for name in names if name in kind), None)


def _table_peak(table: dict[str, float], device: jax.Device) -> float | None:
    name = kind_in(table, getattr(device, "device_kind", ""))
    return table[name] if name else None


def device_peak_flops(device: jax.Device | None = None, fp8: bool = False) -> float | None:
    """The table's peak for a known accelerator (its fp8 peak when `fp8` and it has one),
    else None."""
    device = device or jax.devices()[0]
    fp8_peak = _table_peak(PEAK_FP8_FLOPS, device) if fp8 else None
    return fp8_peak or _table_peak(PEAK_BF16_FLOPS, device)


def matmul_dtype_of(compute_dtype: str, bf16_products: bool) -> str:
    """The dtype a run's matmuls multiply in: bfloat16 where the model computes in bfloat16 and
    the backend reads bfloat16 operands (`Backend.bf16_products`), else float32 (a float32
    model, or bfloat16 operands widened to float32 on CPUs without bfloat16 dot instructions)."""
    return "bfloat16" if compute_dtype == "bfloat16" and bf16_products else "float32"


@functools.cache
def measured_matmul_flops(size: int = 1024, repeats: int = 40, dtype: str = "float32") -> float:
    """Achieved FLOP/s of a jitted matmul with `dtype` operands and float32 results on one
    device: the practical CPU peak of that precision.

    Timed both by the wall clock and by the process's CPU time, spread over the cores it may
    use: on a machine shared with other processes the wall clock sees the cores taken from it
    (a peak measured at a busy moment once read a quarter of the quiet figure, and MFU went
    above 1), while the CPU time counts only the time its threads ran. Many short runs of each
    (a 1024^3 float32 matmul takes about 10 ms on a modern core, already the BLAS kernels'
    steady state), and the higher of the two figures:

    - by the wall clock, the fastest run;
    - by CPU time, the upper quartile of the runs' rates. The CPU time of a run of a few
      milliseconds sometimes reads low (a thread still running on another core is accounted
      at its next scheduler tick): on a 2-core AMD EPYC whose wall clock said 436-460 GFLOP/s,
      the fastest run by CPU time said 622-863, and MFU read 28-48% too low. Such runs are a
      few of the forty, above the quartile.

    A run whose CPU time is under a quarter of its wall-clock time is not counted by CPU time
    at all: a matmul keeps at least one core busy for as long as it runs, unless the machine
    is shared several times over, and one bfloat16 run once read a tenth, which made the peak
    33.5 TFLOP/s where the wall clock said 1.65.
    """
    device = jax.devices()[0]
    a = jax.device_put(jnp.ones((size, size), jnp.dtype(dtype)), device)
    matmul = jax.jit(lambda x: jnp.matmul(x, x, preferred_element_type=jnp.float32))
    matmul(a).block_until_ready()
    wall, cpu_times = float("inf"), []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        matmul(a).block_until_ready()
        run_wall = time.perf_counter() - start
        run_cpu = time.process_time() - start_cpu
        wall = min(wall, run_wall)
        if run_cpu >= run_wall / 4:
            cpu_times.append(run_cpu)
    flops = 2 * size**3
    if not cpu_times:
        return flops / wall
    cpu = sorted(cpu_times)[len(cpu_times) // 4]  # the upper quartile of the rates
    return max(flops / wall, flops / cpu * _usable_cores())


def _usable_cores() -> int:
    """The cores this process may run on (its affinity mask: a container's or taskset's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def peak_flops(
    configured: float = 0.0, fp8: bool = False, matmul_dtype: str = "float32"
) -> tuple[float, str]:
    """Per-device peak FLOP/s and where the figure comes from (the fp8 peak when `fp8`; on a
    CPU, a measured matmul in `matmul_dtype`)."""
    if configured > 0:
        return configured, "train.peak_flops"
    device = jax.devices()[0]
    if fp8 and (peak := _table_peak(PEAK_FP8_FLOPS, device)):
        return peak, f"data sheet ({device.device_kind}, fp8)"
    if peak := _table_peak(PEAK_BF16_FLOPS, device):
        return peak, f"data sheet ({device.device_kind})"
    return measured_matmul_flops(dtype=matmul_dtype), f"measured {matmul_dtype} matmul"


def mesh_peak_flops(
    configured: float, num_devices: int, fp8: bool = False, matmul_dtype: str = "float32"
) -> tuple[float, str]:
    """Peak FLOP/s of a whole mesh of `num_devices`, and where the per-device figure comes from.

    Fake CPU devices share the host's cores: the measured CPU peak is already the whole CPU.
    """
    peak, source = peak_flops(configured, fp8, matmul_dtype)
    return (peak if jax.devices()[0].platform == "cpu" else peak * num_devices), source


def mfu(
    flops_per_token: float,
    tokens_per_s: float,
    configured_peak: float,
    num_devices: int,
    fp8: bool = False,
    matmul_dtype: str = "float32",
) -> float:
    """Model FLOPs utilisation, a fraction: achieved model FLOP/s over the mesh's peak (the
    fp8 peak for an fp8 run, the peak of `matmul_dtype` on a CPU)."""
    peak = mesh_peak_flops(configured_peak, num_devices, fp8, matmul_dtype)[0]
    return flops_per_token * tokens_per_s / peak
