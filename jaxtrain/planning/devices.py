"""The devices `python -m jaxtrain config` sizes a run for, and why.

A run uses every device of the host it starts on, so that is what `config` plans for, unless
`--devices N [--hosts H]` asks for another layout, or a foreign file names the one it was
written for (prime-rl's `[deployment]`, or the launcher's `NNODES` / `GPUS_PER_NODE` /
`WORLD_SIZE`). When the plan differs from this host, the figures of this host are printed too:
they are what `python -m jaxtrain --config FILE` would use here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
from ml_collections import ConfigDict

from jaxtrain.parallel import sharding


def mesh_shape(cfg: ConfigDict, devices: int, hosts: int = 1) -> dict[str, int]:
    """{axis: size} the mesh would have on `devices` devices over `hosts` hosts."""
    ici, dcn = sharding.resolved_sizes(cfg.mesh, devices, hosts)
    return {axis: ici[axis] * dcn[axis] for axis in sharding.MESH_AXES}


@dataclasses.dataclass(frozen=True)
class DevicePlan:
    """`devices` over `hosts`, chosen because of `source`; `here` is this host's count."""

    devices: int
    hosts: int
    source: str
    here: int

    def figures(self, cfg: ConfigDict) -> dict[str, Any]:
        """`hosts` and `devices_from`, plus this host's devices and mesh when they differ."""
        out: dict[str, Any] = {"hosts": self.hosts, "devices_from": self.source}
        if (self.devices, self.hosts) != (self.here, 1):
            try:
                mesh: Any = mesh_shape(cfg, self.here, 1)
            except ValueError as e:
                mesh = f"does not fit: {e}"
            out.update(devices_here=self.here, mesh_here=mesh)
        return out


def plan_devices(
    devices: int | None = None, hosts: int | None = None, report: Any = None
) -> DevicePlan:
    """The layout to plan for: `devices`/`hosts` when given (a --devices/--hosts request), else
    what a foreign file's report says its launch named, else this host's devices."""
    here = jax.device_count()
    where = f"this host: {here} {jax.devices()[0].platform} device(s)"
    if devices is not None:
        hosts = hosts or 1
        return DevicePlan(
            devices, hosts, f"--devices {devices} --hosts {hosts} (planned; {where})", here
        )
    if report is not None and report.launch:
        return DevicePlan(
            report.world_size,
            hosts or report.num_hosts,
            f"{report.launch} (planned; {where})",
            here,
        )
    if hosts is not None and hosts != 1:
        return DevicePlan(here, hosts, f"--hosts {hosts} (planned; {where})", here)
    return DevicePlan(here, 1, where, here)
