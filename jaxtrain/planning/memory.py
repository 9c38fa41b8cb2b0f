"""Will the train step fit? Per-device memory of the state and the compiled step, checked against
what each device has before anything is allocated.

Two figures, from cheap to exact:

- the train state per device (parameters and optimizer state), from the state layout's shapes,
  dtypes and partition specs: plain arithmetic, for any mesh size, so `config --devices 64`
  sizes a 64-GPU run on a laptop;
- the compiled step's own plan (`compiled.memory_analysis()`: arguments, outputs not aliased
  to the donated state, and XLA's scratch for activations, gradients and collectives).

The trainer checks the first before compiling and the second before allocating the state; a
run that cannot fit stops with both figures in GiB, what dominates and the settings that help,
instead of an out-of-memory error deep inside XLA.

Device memory: the allocator's limit on GPUs (`memory_stats()["bytes_limit"]`, which
`XLA_PYTHON_CLIENT_MEM_FRACTION` sets); on CPUs the host's available memory shared by the local
devices (fake CPU devices all live in the one host's RAM).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from ml_collections import ConfigDict

from jaxtrain import run
from jaxtrain.errors import ConfigError
from jaxtrain.parallel import sharding

GIB = 2**30


class MemoryPlanError(ConfigError):
    """The train step needs more memory per device than the devices have."""


def gib(n: float) -> str:
    """Bytes as GiB (MiB below 1 GiB), three significant digits or whole GiB."""
    if n >= 1000 * GIB:
        return f"{n / GIB:,.0f} GiB"
    return f"{n / GIB:.3g} GiB" if n >= GIB else f"{n / 2**20:.3g} MiB"


def shard_bytes(leaf: Any, axis_sizes: Mapping[str, int]) -> int:
    """Bytes of one device's shard of an abstract array with a NamedSharding.

    Each dimension is split over the mesh axes its PartitionSpec names (rounded up, as XLA pads
    an uneven split); `axis_sizes` gives those axes' sizes, so any planned mesh can be sized.
    """
    spec = tuple(getattr(getattr(leaf, "sharding", None), "spec", ()) or ())
    shape = list(leaf.shape)
    for dim, entry in enumerate(spec[: len(shape)]):
        names = sharding.rule_targets(entry)
        shape[dim] = -(-shape[dim] // math.prod(axis_sizes.get(n, 1) for n in names))
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(leaf.dtype).itemsize


def tree_bytes(tree: Any, axis_sizes: Mapping[str, int]) -> int:
    """Bytes per device of every array leaf of an abstract tree."""
    return sum(
        shard_bytes(leaf, axis_sizes) for leaf in jax.tree.leaves(tree) if hasattr(leaf, "shape")
    )


@dataclasses.dataclass
class MemoryPlan:
    """Per-device bytes of a train step; `temp` and `outputs` are known once it is compiled."""

    params: int
    optimizer: int
    batch: int
    temp: float | None = None  # XLA scratch: activations, gradients, collective buffers
    outputs: float = 0.0  # outputs not aliased to the donated state (the metrics)
    code: float = 0.0  # the compiled program itself

    @property
    def state(self) -> int:
        """Parameters + optimizer state (the donated train state)."""
        return self.params + self.optimizer

    @property
    def total(self) -> float:
        """Everything live at the step's peak, as far as it is known."""
        return self.state + self.batch + (self.temp or 0.0) + self.outputs + self.code

    def breakdown(self) -> str:
        """'parameters 1.2 GiB, optimizer state 2.4 GiB, ...' in the order of their sizes."""
        parts = [
            ("parameters", self.params),
            ("optimizer state", self.optimizer),
            ("batch", self.batch),
        ]
        if self.temp is not None:
            parts.append(("activations, gradients and scratch (XLA)", self.temp))
        return ", ".join(f"{name} {gib(n)}" for name, n in sorted(parts, key=lambda p: -p[1]))


def plan_state(
    layout_abstract: Mapping[str, Any], batch: Mapping[str, Any], axis_sizes: Mapping[str, int]
) -> MemoryPlan:
    """The per-device state and batch bytes of a state layout on a mesh of `axis_sizes`."""
    return MemoryPlan(
        params=tree_bytes(layout_abstract["params"], axis_sizes),
        optimizer=tree_bytes(layout_abstract["opt_state"], axis_sizes),
        batch=tree_bytes(batch, axis_sizes),
    )


def plan_for_mesh(
    cfg: ConfigDict, devices: int, hosts: int = 1
) -> tuple[MemoryPlan, dict[str, int]]:
    """The state and batch plan of `cfg` on a mesh of `devices` over `hosts`, from arithmetic.

    No device of that mesh is needed: the partition specs come from the rule table (the run
    laid out on one device here), the shard sizes from the planned axis sizes.
    """
    ici, dcn = sharding.resolved_sizes(cfg.mesh, devices, hosts)
    axis_sizes = {a: ici[a] * dcn[a] for a in sharding.MESH_AXES}
    one = run.for_reading(cfg, jax.devices()[:1])
    return plan_state(one.layout.abstract, one.abstract_batch(), axis_sizes), axis_sizes


def plan_command(config_path: str = "", devices: int = 0, hosts: int = 1) -> str:
    """The `plan` command line that picks a layout for this config and device count (the
    config from this process's own `--config` when not given)."""
    if not config_path:
        argv = sys.argv[1:]
        for i, arg in enumerate(argv):
            if arg == "--config" and i + 1 < len(argv):
                config_path = argv[i + 1]
            elif arg.startswith("--config="):
                config_path = arg.split("=", 1)[1]
    command = f"python -m jaxtrain plan --config {config_path or 'FILE'} --devices {devices or 'N'}"
    return command + (f" --hosts {hosts}" if hosts > 1 else "")


def describe_state(
    plan: MemoryPlan, axis_sizes: Mapping[str, int], config_path: str = "", hosts: int = 1
) -> str:
    """One line for `config`: the state per device and the gradients it implies."""
    mesh = " x ".join(f"{k}={v}" for k, v in axis_sizes.items() if v > 1) or "1 device"
    # Stages hold equal runs of the stack plus the (replicated) embedding and output layer.
    stages = ", the same on every pipeline stage" if axis_sizes.get("pipeline", 1) > 1 else ""
    return (
        f"parameters {gib(plan.params)} + optimizer state {gib(plan.optimizer)} + "
        f"gradients ~{gib(plan.params)} = {gib(plan.state + plan.params)} per device on "
        f"mesh {mesh}{stages}, before activations (the trainer checks the compiled step "
        "before it allocates; tools/compile_plan.py compiles it for a planned mesh); "
        f"to pick a layout: {plan_command(config_path, math.prod(axis_sizes.values()), hosts)}"
    )


def add_compiled(plan: MemoryPlan, compiled: Any) -> MemoryPlan:
    """The plan completed with a compiled step's memory analysis (per device)."""
    stats = compiled.memory_analysis()
    if stats is None:
        return plan

    def field(name: str) -> float:
        return float(getattr(stats, f"{name}_size_in_bytes", 0) or 0)

    return dataclasses.replace(
        plan,
        temp=field("temp"),
        outputs=max(field("output") - field("alias"), 0.0),
        code=field("generated_code"),
    )


def _host_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else total physical memory, else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def device_capacity(devices: Sequence[Any]) -> tuple[float | None, str]:
    """(bytes one device may use, where that figure comes from); None when unknown."""
    device = devices[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        limit = stats.get("bytes_limit") or stats.get("bytes_reservable_limit")
        if limit:
            return float(limit), f"{device.device_kind} allocator limit"
        return None, f"{device.device_kind} (no memory statistics)"
    available = _host_available_bytes()
    if available is None:
        return None, "host memory (unknown)"
    local = sum(1 for d in devices if d.process_index == jax.process_index()) or 1
    share = f"shared by {local} CPU devices" if local > 1 else "one CPU device"
    return available / local, f"available host memory {gib(available)}, {share}"


def _advice(
    plan: MemoryPlan, capacity: float, cfg: ConfigDict, axis_sizes: Mapping[str, int]
) -> list[str]:
    """The settings that would shrink what dominates, with the figures they act on."""
    advice = []
    fsdp = axis_sizes.get("fsdp", 1)
    if plan.state >= 0.4 * plan.total:
        total_state = plan.state * fsdp  # roughly: the sharded part, re-assembled
        needed = math.ceil(total_state / max(0.6 * capacity, 1.0))
        advice.append(
            f"shard parameters and optimizer state over more devices: mesh.ici_fsdp (within a "
            f"host) / mesh.dcn_fsdp (across hosts); the state is about {gib(total_state)} in "
            f"all, so about {needed} fsdp shards leave room for activations (now fsdp={fsdp})"
        )
        if cfg.mesh.rules == "data":
            advice.append('mesh.rules="fsdp_tensor" (mesh.rules="data" replicates the state)')
        if cfg.model.param_dtype == "float32":
            advice.append(
                "model.param_dtype=bfloat16 halves parameters and optimizer state "
                "(at some cost in precision)"
            )
    if plan.temp is not None and plan.temp >= 0.3 * plan.total:
        micro = cfg.train.micro_batch_size or cfg.train.global_batch_size
        advice.append(
            f"a smaller train.micro_batch_size (now {micro} sequences per forward "
            "pass; activations scale with it, gradient accumulation keeps the "
            "global batch)"
        )
        if cfg.model.get("remat", "full") != "full":
            advice.append(
                f'model.remat="full" (now "{cfg.model.remat}": keep only each '
                "layer's input for the backward pass)"
            )
        if not cfg.train.get("loss_chunks", 0):
            logits = (
                micro
                * cfg.train.seq_len
                * cfg.model.vocab_size
                * 4
                / max(axis_sizes.get("data", 1) * fsdp, 1)
            )
            advice.append(
                f"train.loss_chunks=8 (the float32 logits are {gib(logits)} per "
                "device at once without it)"
            )
    return advice


def check_fits(
    plan: MemoryPlan,
    capacity: float | None,
    source: str,
    cfg: ConfigDict,
    axis_sizes: Mapping[str, int],
) -> None:
    """MemoryPlanError when the plan's total exceeds the capacity of one device."""
    if capacity is None or plan.total <= capacity:
        return
    mesh = " x ".join(f"{k}={v}" for k, v in axis_sizes.items() if v > 1) or "1 device"
    if plan.temp is None:
        need = f"the train state alone (before activations) needs {gib(plan.total)}"
    else:
        need = f"the compiled train step needs {gib(plan.total)}"
    lines = [
        f"{need} per device but a device has {gib(capacity)} ({source}); mesh {mesh}. "
        f"Per device: {plan.breakdown()}. Nothing was allocated. To fit:"
    ]
    lines += [f"  - {a}" for a in _advice(plan, capacity, cfg, axis_sizes)]
    lines.append(
        "Size a layout before running it: python -m jaxtrain config FILE --devices N "
        "(or tools/compile_plan.py), or let the planner pick one: "
        f"{plan_command('', math.prod(axis_sizes.values()), jax.process_count())} "
        f"--device-kind {_kind_name(source)}; train.check_memory=false skips this check."
    )
    raise MemoryPlanError("\n".join(lines))


def _kind_name(source: str) -> str:
    """The device kind named in a capacity source ('NVIDIA H100 80GB HBM3 ...'), as the
    planner and the peak table spell it."""
    from jaxtrain.hardware.peaks import PEAK_BF16_FLOPS

    text = source.upper().replace(" ", "")
    return next((k for k in PEAK_BF16_FLOPS if k in text), "cpu")
