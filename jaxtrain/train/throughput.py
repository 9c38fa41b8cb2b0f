"""Tokens/s, step time and MFU of a timed window of steps (`step_timer.StepTimer.take`).

The peak is fixed once per run, before its first step, in the precision the run's matmuls take
(`jaxtrain.hardware.peaks`): measured on CPUs, so that measuring it inside the loop cannot
slow a timed window; from the data sheet on known accelerators.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxtrain.hardware import peaks


@dataclasses.dataclass(frozen=True)
class Throughput:
    """What turns (steps, seconds) into the logged throughput figures."""

    tokens_per_step: int
    flops_per_token: float
    peak_flops: float  # of the whole mesh, FLOP/s
    peak_source: str  # where the per-device figure comes from

    def figures(self, window: tuple[int, float]) -> dict[str, float]:
        """tokens_per_s, step_time and mfu of `steps` steps taking `seconds`."""
        steps, seconds = window
        tokens_per_s = self.tokens_per_step * steps / max(seconds, 1e-9)
        return {
            "tokens_per_s": tokens_per_s,
            "step_time": seconds / steps,
            "mfu": self.flops_per_token * tokens_per_s / self.peak_flops,
        }


def for_run(cfg: Any, spec: Any, bf16_products: bool, num_devices: int) -> Throughput:
    """The throughput figures of a run of `cfg` with model `spec` on `num_devices`, its
    backend reading bfloat16 operands or not (`Backend.bf16_products`)."""
    peak, source = peaks.mesh_peak_flops(
        cfg.train.peak_flops,
        num_devices,
        fp8=spec.quantization == "fp8",
        matmul_dtype=peaks.matmul_dtype_of(spec.dtype, bf16_products),
    )
    return Throughput(
        tokens_per_step=cfg.train.global_batch_size * cfg.train.seq_len,
        flops_per_token=spec.flops_per_token(cfg.train.seq_len),
        peak_flops=peak,
        peak_source=source,
    )
