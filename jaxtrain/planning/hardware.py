"""What the planner assumes of each device kind: peak FLOP/s, memory, link bandwidths.

Peaks are `jaxtrain.hardware.peaks` (vendor data sheets, dense bf16). The other figures:

- `hbm_gib`: memory per device from the data sheets (H100 SXM 80 GB, H200 141 GB, B200 180 GB
  (DGX B200: 1,440 GB over 8), MI300X 192 GB, MI325X 256 GB, MI355X 288 GB).
- `intra_gbs`: the bus bandwidth (GB/s per device, nccl-tests' `busbw`) a collective reaches
  inside a host: about 80% of the one-way link bandwidth. NVLink 4 (H100/H200) is 450 GB/s
  each way, NVLink 5 (B200) 900; the MI300X/MI325X reach their 7 peers over Infinity Fabric
  links of 64 GB/s each way (448 in all), the MI355X over 7 x 76.8 GB/s.
- `inter_gbs`: the same across hosts, with one 400 Gb/s NIC per device (InfiniBand NDR,
  RoCE, Pollara 400): 50 GB/s each way, about 40 GB/s of bus bandwidth.
- `efficiency`: the fraction of the peak that the matmuls of a large transformer step reach
  when nothing waits for communication (large bf16 GEMMs reach about 70-75% of the peak on
  H100/H200 with cuBLAS and 55-60% on MI300-class GPUs with hipBLASLt in public GEMM
  benchmarks; the rest of the step, norms, attention softmax and the optimizer, run below it).
- `latency_us`: a fixed cost per collective (launch and synchronisation), inside / across hosts.
- `hbm_gbs`: memory bandwidth per device (data sheets: H100 SXM 3.35 TB/s, H200 4.8, B200 8,
  MI300X 5.3, MI325X 6, MI355X 8): the rate of the optimizer update and of gradient
  accumulation, which read and write every state byte a device holds and do little arithmetic.
- `overlap`: the fraction of the compute time that can hide `data`/`fsdp` collectives. A GPU
  moves them with its copy engines and NICs while its cores run matmuls; fake CPU devices
  copy with the same cores that compute, so nothing hides there.

For `cpu` the peak, memory, bandwidths and latencies are measured on this host for the
planned number of fake devices (`cpu_kind`, `planning/cpu_links.py`).

These are planning figures, not measurements of a given cluster: `--hardware FILE.json`
replaces any of them ({"H100": {"inter_gbs": 80}}, or a flat {"inter_gbs": 80} for the kind
planned for), and `--intra-gbs` / `--inter-gbs` set the two bandwidths.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.hardware import peaks


@dataclasses.dataclass(frozen=True)
class DeviceKind:
    """The planner's figures for one kind of device."""

    name: str
    peak_flops: float  # dense bf16, per device
    hbm_gib: float
    intra_gbs: float
    inter_gbs: float
    efficiency: float
    hbm_gbs: float
    latency_intra_us: float = 10.0
    latency_inter_us: float = 30.0
    overlap: float = 0.8


_TABLE: dict[str, dict[str, float]] = {
    "H100": dict(hbm_gib=80, intra_gbs=360, inter_gbs=40, efficiency=0.72, hbm_gbs=3350),
    "H200": dict(hbm_gib=141, intra_gbs=360, inter_gbs=40, efficiency=0.74, hbm_gbs=4800),
    "B200": dict(hbm_gib=180, intra_gbs=720, inter_gbs=40, efficiency=0.65, hbm_gbs=8000),
    "MI300X": dict(hbm_gib=192, intra_gbs=300, inter_gbs=40, efficiency=0.57, hbm_gbs=5300),
    "MI325X": dict(hbm_gib=256, intra_gbs=300, inter_gbs=40, efficiency=0.58, hbm_gbs=6000),
    "MI355X": dict(hbm_gib=288, intra_gbs=430, inter_gbs=40, efficiency=0.55, hbm_gbs=8000),
    # Fake CPU devices: one host's cores and memory shared by all of them; everything but
    # the efficiency is measured (`cpu_kind`).
    "cpu": dict(hbm_gib=0, intra_gbs=0, inter_gbs=0, efficiency=0.5, hbm_gbs=0, overlap=0.0),
}
KINDS = tuple(_TABLE)


def expected_bus_gbs(device_kind: str, across_hosts: bool) -> tuple[str, float] | None:
    """(the table's kind, the bus bandwidth a collective should reach) for a device as jax
    names it ("NVIDIA H100 80GB HBM3", "AMD Instinct MI300X"), across hosts or inside one;
    None for kinds the table does not know (and CPUs, whose figure is no expectation)."""
    key = peaks.kind_in([k for k in KINDS if k != "cpu"], device_kind)
    if key is None:
        return None
    return key, _TABLE[key]["inter_gbs" if across_hosts else "intra_gbs"]


def _peak(name: str) -> float:
    return peaks.PEAK_BF16_FLOPS.get(name, 0.0)


def cpu_kind(devices: int) -> dict[str, float]:
    """The host's matmul rate and available memory shared by `devices` fake devices, and the
    links and memory bandwidth measured with that many (`planning/cpu_links.py`)."""
    from jaxtrain.planning import cpu_links, memory

    available = memory._host_available_bytes() or 0
    return {
        "peak_flops": peaks.measured_matmul_flops() / devices,
        "hbm_gib": available / devices / 2**30,
        **cpu_links.measured(devices),
    }


def device_kind(
    name: str,
    devices: int,
    hardware_file: str = "",
    intra_gbs: float = 0.0,
    inter_gbs: float = 0.0,
) -> DeviceKind:
    """The figures for `name` (one of KINDS, any case), with the user's replacements."""
    key = next((k for k in KINDS if k.lower() == name.lower()), None)
    if key is None:
        raise ConfigError(f"--device-kind {name!r} is not known; pick one of {', '.join(KINDS)}.")
    figures: dict[str, Any] = {"peak_flops": _peak(key), **_TABLE[key]}
    if key == "cpu":
        figures.update(cpu_kind(devices))
    if hardware_file:
        figures.update(_from_file(hardware_file, key))
    if intra_gbs:
        figures["intra_gbs"] = intra_gbs
    if inter_gbs:
        figures["inter_gbs"] = inter_gbs
    fields = {f.name for f in dataclasses.fields(DeviceKind)} - {"name"}
    unknown = sorted(set(figures) - fields)
    if unknown:
        raise ConfigError(
            f"--hardware {hardware_file}: unknown figure(s) {unknown}; known: {sorted(fields)}."
        )
    return DeviceKind(name=key, **{k: float(v) for k, v in figures.items()})


def _from_file(path: str, key: str) -> Mapping[str, Any]:
    if not os.path.exists(path):
        raise ConfigError(f"--hardware {path}: no such file; give a JSON file of figures.")
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ConfigError(f"--hardware {path}: not valid JSON ({e}).") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--hardware {path}: expected a JSON object of figures.")
    if key in data and isinstance(data[key], dict):
        return data[key]
    return {k: v for k, v in data.items() if not isinstance(v, dict)}
