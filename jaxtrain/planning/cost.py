"""Predicted step time of a layout: compute at the device's efficiency, plus the collectives'
bytes over the links they cross, less what the schedule hides.

    compute = FLOPs per device per step x remat factor / (peak x efficiency x fill) / (1 - bubble)
    update  = bytes the optimizer update and gradient accumulation move / memory bandwidth
    comm    = sum over collectives of (bus bytes / link bandwidth + runs x latency)
    step    = compute + update + blocking comm + max(0, hideable comm - overlap x compute)

- FLOPs are jaxtrain's formula (`ModelSpec.flops_per_token`: 6 x matmul parameters + causal
  attention); rematerialisation adds the recomputed forward (`REMAT_FACTOR`). Where the
  compiled program is the one that runs (`cpu`: the planner compiles for fake CPU devices),
  its own matrix-product FLOPs replace them (`executed_flops_per_device`, `hlo_flops`): they
  include the recomputation, pipeline bubbles, padded and masked rows that the formula does
  not. On accelerators the formula stands, since their attention and grouped-matmul kernels
  are not the CPU program's.
- `fill`: small matmuls run below the peak; a device's rows per micro batch r give
  r / (r + HALF_FILL_ROWS), a simple saturating curve (a planning heuristic, not measured).
- The update counts because it scales with the state a device holds, not with its tokens:
  every `data` replica updates all of its copy, where `fsdp` shards update a slice each.
- A collective crosses the inter-host network when any mesh axis it spans has `dcn_*` > 1.
- Hideable: gathers of weights and reductions of gradients over `data`/`fsdp` (XLA's
  latency-hiding scheduler prefetches the next layer's weights during this layer's matmuls;
  the device kind's `overlap` says how much of the compute can hide them); blocking: tensor,
  context and expert collectives, which sit between a layer's matmuls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from jaxtrain.planning.hardware import DeviceKind

# Forward FLOPs are 2 of the 6 per parameter and token: full remat recomputes them all; the
# dots policies save matmul outputs and recompute only the cheap elementwise work around them.
REMAT_FACTOR = {
    "none": 1.0,
    "dots": 1.02,
    "dots_with_no_batch_dims": 1.05,
    "minimal": 1.05,
    "full": 8 / 6,
}
HALF_FILL_ROWS = 256  # rows per device at which a matmul is assumed to reach half its rate
_HIDEABLE_AXES = {"data", "fsdp"}


@dataclasses.dataclass
class Prediction:
    """The predicted step and what it is made of (seconds per step)."""

    step_s: float
    compute_s: float
    update_s: float
    comm_s: dict[str, float]  # exposed time per "kind over axes"
    tokens_per_s: float
    mfu: float

    @property
    def worst_collective(self) -> str:
        """The collective costing the most exposed time ('' when none does)."""
        if not self.comm_s:
            return ""
        key, seconds = max(self.comm_s.items(), key=lambda kv: kv[1])
        return key if seconds > 0 else ""


def crosses_hosts(key: str, dcn: Mapping[str, int]) -> bool:
    """Whether a 'kind over a+b' collective spans an axis split across hosts."""
    axes = key.split(" over ", 1)[1].split("+")
    return any(dcn.get(a, 1) > 1 for a in axes)


def predict(
    kind: DeviceKind,
    *,
    model_flops_per_device: float,
    remat: str,
    rows_per_device: float,
    bubble: float,
    collectives: Mapping[str, Mapping[str, float]],
    dcn: Mapping[str, int],
    tokens_per_step: float,
    devices: int,
    update_bytes: float = 0.0,
    executed_flops_per_device: float = 0.0,
) -> Prediction:
    """Step time, tokens/s and MFU of one layout from its per-device figures;
    `executed_flops_per_device` (> 0): the program's own FLOPs, remat and bubble included."""
    fill = rows_per_device / (rows_per_device + HALF_FILL_ROWS)
    rate = kind.peak_flops * kind.efficiency * fill
    if executed_flops_per_device > 0:
        compute = executed_flops_per_device / rate
    else:
        compute = model_flops_per_device * REMAT_FACTOR.get(remat, 1.0) / rate / (1 - bubble)
    update = update_bytes / (kind.hbm_gbs * 1e9) if kind.hbm_gbs > 0 else 0.0
    hideable, blocking = {}, {}
    for key, c in collectives.items():
        remote = crosses_hosts(key, dcn)
        bandwidth = (kind.inter_gbs if remote else kind.intra_gbs) * 1e9
        latency = (kind.latency_inter_us if remote else kind.latency_intra_us) * 1e-6
        seconds = c["bus_bytes"] / bandwidth + c["runs"] * latency
        axes = set(key.split(" over ", 1)[1].split("+"))
        (hideable if axes <= _HIDEABLE_AXES else blocking)[key] = seconds
    budget = kind.overlap * compute
    exposed = dict(blocking)
    # Hide the cheapest hideable collectives first; what exceeds the budget is exposed.
    for key, seconds in sorted(hideable.items(), key=lambda kv: kv[1]):
        hidden = min(seconds, budget)
        budget -= hidden
        exposed[key] = seconds - hidden
    step = compute + update + sum(exposed.values())
    tokens_per_s = tokens_per_step / step
    mfu = model_flops_per_device / step / kind.peak_flops
    return Prediction(step, compute, update, exposed, tokens_per_s, mfu)
