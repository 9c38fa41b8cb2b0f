"""The devices `python -m jaxtrain config` sizes a run for, and why.

A run uses every device of the host it starts on, so that is what `config` plans for a
jaxtrain config, unless `--devices N [--hosts H]` asks for another layout. A foreign file is
planned for the launch it was written for: prime-rl's `[deployment]`, or the launcher's
`NNODES` / `GPUS_PER_NODE` / `WORLD_SIZE` (their launcher defaults when unset). When its
parallel sizes need more devices than that launch has (a 405B or DeepSeek-V3 example read
without NNODES), `config` plans for the hosts they need and says what the launch has; only
training refuses. When the plan differs from this host, the figures of this host are printed
too: they are what `python -m jaxtrain --config FILE` would use here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import jax
from ml_collections import ConfigDict

from jaxtrain import compat
from jaxtrain.compat.common.report import DevicesNotDivisible
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


def resolve_for_devices(
    path: str,
    overrides: Sequence[str] = (),
    native: Sequence[str] = (),
    *,
    devices: int | None = None,
    hosts: int | None = None,
    primus_root: str | None = None,
    maxtext_root: str | None = None,
) -> tuple[ConfigDict, Any, DevicesNotDivisible | None]:
    """A foreign file resolved for `devices` over `hosts` (as WORLD_SIZE and NNODES) when
    given, else for its launch; when that launch cannot hold the file's parallel sizes, for the
    hosts they need, with the refusal `train` would give as the third item."""
    env = dict(os.environ)
    if devices is not None:
        env.update(WORLD_SIZE=str(devices), NNODES=str(hosts or 1))

    def load() -> tuple[ConfigDict, Any]:
        return compat.load_foreign(
            path,
            list(overrides),
            native_overrides=list(native),
            allow_unsupported=True,
            env=env,
            primus_root=primus_root,
            maxtext_root=maxtext_root,
        )

    try:
        return (*load(), None)
    except DevicesNotDivisible as short:
        if devices is not None:
            raise  # the devices asked for cannot hold the file's parallel sizes
        env.update({short.nodes_key: str(short.hosts)})
        env.pop("WORLD_SIZE", None)
        return (*load(), short)


def plan_devices(
    devices: int | None = None,
    hosts: int | None = None,
    report: Any = None,
    short: DevicesNotDivisible | None = None,
) -> DevicePlan:
    """The layout to plan for: `devices`/`hosts` when given (a --devices/--hosts request), else
    the launch a foreign file's report names (`short`: grown from one too small for its
    parallel sizes), else this host's devices."""
    here = jax.device_count()
    where = f"this host: {here} {jax.devices()[0].platform} device(s)"
    if devices is not None:
        hosts = hosts or 1
        return DevicePlan(
            devices, hosts, f"--devices {devices} --hosts {hosts} (planned; {where})", here
        )
    if short is not None:
        need = (
            f"{short.hosts} host(s) x {short.per_host} devices, as the parallel sizes need "
            f"a multiple of {short.need} (planned; this launch has {short.world_size} "
            f"({short.world_source}), which training refuses: set {short.nodes_key}="
            f"{short.hosts}; {where})"
        )
        return DevicePlan(report.world_size, hosts or report.num_hosts, need, here)
    if report is not None and (report.launch or report.world_source != "default"):
        named = report.launch or report.world_source
        return DevicePlan(
            report.world_size, hosts or report.num_hosts, f"{named} (planned; {where})", here
        )
    if hosts is not None and hosts != 1:
        return DevicePlan(here, hosts, f"--hosts {hosts} (planned; {where})", here)
    return DevicePlan(here, 1, where, here)
