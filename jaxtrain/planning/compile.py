"""Compile-only planning: lower and compile the real train step for a mesh, allocate nothing.

The state layout (`jaxtrain.train.state.state_layout`) and the batch are abstract
(ShapeDtypeStructs carrying shardings), so compiling the run's jitted step
(`RunSetup.compile_train_step`, the program the trainer runs) sizes a 70B model on a laptop.
From the compiled program come the per-device memory XLA plans (arguments, outputs, scratch,
code), its FLOP count, and the collectives in the optimised HLO.

Depth. Layers are scanned, so memory is affine in the layer count: compiling at two small
depths and extrapolating to the config's depth (`plan(cfg, layers=(2, 4))`) sizes an 80-layer
model from two quick compiles. XLA's cost analysis counts a loop body once whatever its trip
count, so its FLOPs come from extra compiles with the layers unrolled and one micro batch
(`step_flops`), extrapolated the same way; jaxtrain's formula (`ModelSpec.flops_per_token x
tokens`) is printed beside them. XLA's count includes what the formula leaves out: the forward
pass recomputed under rematerialisation and the masked half of causal attention.

The numbers are those of the backend that compiles (fake CPU devices here): fusion, scratch and
code sizes differ on GPUs, while parameter, optimizer and batch bytes (the arguments) and the
collectives chosen by the SPMD partitioner are the same.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from ml_collections import ConfigDict

from jaxtrain import run
from jaxtrain.config import loader as config_lib
from jaxtrain.config import mesh_check
from jaxtrain.errors import ConfigError
from jaxtrain.parallel import sharding

COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
# An HLO instruction's opcode is followed by its operand list: `all-gather(`, `all-reduce-start(`.
_OPCODE = re.compile(r"\b(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")
MEMORY_FIELDS = ("argument", "output", "alias", "temp", "generated_code")


@dataclasses.dataclass
class StepPlan:
    """What one compiled train step needs, per device."""

    num_layers: int
    mesh: dict[str, int]
    memory: dict[str, float]  # bytes per device: argument, output, alias, temp, generated_code
    xla_flops: float  # per device per step by XLA's cost analysis; 0 = not measured
    formula_flops: float  # per device per step: flops_per_token x tokens / devices
    collectives: dict[str, int]  # instructions in the optimised HLO, by kind
    compile_s: float = 0.0
    # Pipeline stages, blocks per stage, micro batches and bubble ({} without a pipeline).
    pipeline: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def peak_bytes(self) -> float:
        """Arguments + outputs not aliased to them + scratch: the live set XLA plans for."""
        m = self.memory
        return m["argument"] + m["output"] - m["alias"] + m["temp"]


def count_collectives(hlo_text: str) -> dict[str, int]:
    """Collective instructions in HLO text by kind (async `-start` forms counted once)."""
    counts = dict.fromkeys(COLLECTIVES, 0)
    for match in _OPCODE.finditer(hlo_text):
        counts[match.group(1)] += 1
    return counts


def fold_hosts(mesh_cfg: ConfigDict, num_devices: int, hosts: int) -> ConfigDict:
    """A one-process mesh config whose axes are `ici x dcn` as if `hosts` processes ran.

    Lets one process with N fake devices stand for `hosts` hosts of N / hosts devices: the
    program's shapes and collectives depend on axis sizes, not on which links join them.
    """
    ici, dcn = sharding.resolved_sizes(mesh_cfg, num_devices, hosts)
    folded = ConfigDict({f"{side}_{a}": 1 for a in sharding.MESH_AXES for side in ("ici", "dcn")})
    for axis in sharding.MESH_AXES:
        folded[f"ici_{axis}"] = ici[axis] * dcn[axis]
    folded.rules = mesh_cfg.rules
    return folded


def compile_step(
    cfg: ConfigDict, devices: Sequence[Any] | None = None, hosts: int = 1
) -> tuple[StepPlan, Any]:
    """Compiles the train step of `cfg` for its mesh; returns the plan and the compiled step."""
    devices = list(devices if devices is not None else jax.devices())
    mesh_cfg = fold_hosts(cfg.mesh, len(devices), hosts) if hosts > 1 else None
    setup = run.setup(cfg, devices, check_data=False, mesh_cfg=mesh_cfg)
    start = time.perf_counter()
    _, compiled = setup.compile_train_step()
    seconds = time.perf_counter() - start
    stats = compiled.memory_analysis()
    memory = {f: float(getattr(stats, f"{f}_size_in_bytes", 0) or 0) for f in MEMORY_FIELDS}
    tokens = cfg.train.global_batch_size * cfg.train.seq_len
    plan = StepPlan(
        num_layers=setup.spec.num_layers,
        mesh=setup.axis_sizes,
        memory=memory,
        xla_flops=0.0,
        formula_flops=setup.spec.flops_per_token(cfg.train.seq_len) * tokens / len(devices),
        collectives=count_collectives(compiled.as_text()),
        compile_s=seconds,
        pipeline=_pipeline(cfg, setup.axis_sizes),
    )
    return plan, compiled


def _pipeline(cfg: ConfigDict, mesh: dict[str, int]) -> dict[str, Any]:
    """`mesh_check.pipeline_summary` of `cfg` on a mesh of `mesh` sizes ({} without stages)."""
    if mesh.get("pipeline", 1) <= 1:
        return {}
    summary = mesh_check.pipeline_summary(
        run.validate(cfg, check_data=False),
        mesh,
        dict(run.rules_of(cfg)),
        micro_batch=config_lib.micro_batch_size(cfg),
        schedule=mesh_check.pipeline_schedule(cfg),
    )
    return summary if isinstance(summary, dict) else {}


def _affine(x0: float, y0: float, x1: float, y1: float, x: float) -> float:
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _variant(cfg: ConfigDict, **overrides: Any) -> ConfigDict:
    return config_lib.apply_overrides(ConfigDict(cfg.to_dict()), overrides)


def step_flops(cfg: ConfigDict, devices: Sequence[Any] | None = None, hosts: int = 1) -> float:
    """XLA's FLOPs per device for a whole step of `cfg`.

    XLA counts a loop body once, so the step is compiled with its layers unrolled and one
    micro batch, and the count is multiplied by the micro batches (the optimizer update,
    a few FLOPs per parameter, is then counted that many times: negligible).
    """
    micro = config_lib.micro_batch_size(cfg)
    flat = _variant(
        cfg,
        **{
            "model.scan_layers": False,
            "train.global_batch_size": micro,
            "train.micro_batch_size": 0,
        },
    )
    compiled = compile_step(flat, devices, hosts)[1]
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float((cost or {}).get("flops", 0.0)) * (cfg.train.global_batch_size // micro)


def plan(
    cfg: ConfigDict,
    layers: Sequence[int] = (),
    devices: Sequence[Any] | None = None,
    hosts: int = 1,
) -> tuple[StepPlan, list[StepPlan]]:
    """The plan at the config's depth: compiled directly, or from two shallower compiles.

    With `layers=(a, b)` the config is compiled at a and b layers and every memory figure and
    the FLOPs are extended linearly to `model.num_layers`; the collective counts are the deeper
    compile's (the scanned layer is one loop body whatever the depth). XLA's FLOPs come from
    extra compiles with unrolled layers (see `step_flops`), so they are only measured with
    `layers` (a full-depth unrolled compile would take long). Returns the (possibly
    extrapolated) plan and the plans actually compiled.
    """
    full = int(cfg.model.num_layers)
    if not layers or full in layers:
        result, _ = compile_step(cfg, devices, hosts)
        if layers:
            result.xla_flops = step_flops(cfg, devices, hosts)
        return result, [result]
    if len(layers) != 2 or not 0 < layers[0] < layers[1]:
        raise ConfigError(f"layers={list(layers)}: give two increasing depths, e.g. 2,4.")
    measured = []
    for depth in layers:
        shallow = _variant(cfg, **{"model.num_layers": depth})
        compiled = compile_step(shallow, devices, hosts)[0]
        compiled.xla_flops = step_flops(shallow, devices, hosts)
        measured.append(compiled)
    a, b = measured
    memory = {
        k: _affine(a.num_layers, a.memory[k], b.num_layers, b.memory[k], full)
        for k in MEMORY_FIELDS
    }
    flops = _affine(a.num_layers, a.xla_flops, b.num_layers, b.xla_flops, full)
    spec = run.validate(cfg, check_data=False)
    tokens = cfg.train.global_batch_size * cfg.train.seq_len
    devices_n = int(np.prod(list(b.mesh.values())))
    result = StepPlan(
        num_layers=full,
        mesh=b.mesh,
        memory=memory,
        xla_flops=flops,
        formula_flops=spec.flops_per_token(cfg.train.seq_len) * tokens / devices_n,
        collectives=b.collectives,
        compile_s=a.compile_s + b.compile_s,
        pipeline=_pipeline(cfg, b.mesh),
    )
    return result, measured


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def format_plan(name: str, result: StepPlan, measured: Sequence[StepPlan]) -> str:
    """A Markdown table: one row per compiled depth and one for the config's depth."""
    head = (
        "| model | layers | mesh | arguments | outputs | temp | peak | XLA TFLOP | "
        "formula TFLOP | all-gather | reduce-scatter | all-reduce | all-to-all | "
        "coll.-permute |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    rows = list(measured) + ([] if result in measured else [result])
    for p in rows:
        mesh = " x ".join(f"{k}={v}" for k, v in p.mesh.items() if v > 1) or "1 device"
        depth = f"{p.num_layers}" + ("" if p in measured else " (extrapolated)")
        xla = f"{p.xla_flops / 1e12:.1f}" if p.xla_flops else "-"
        c = p.collectives
        lines.append(
            f"| {name} | {depth} | {mesh} | {_size(p.memory['argument'])} | "
            f"{_size(p.memory['output'] - p.memory['alias'])} | {_size(p.memory['temp'])} | "
            f"{_size(p.peak_bytes)} | {xla} | {p.formula_flops / 1e12:.1f} | "
            + " | ".join(str(c[k]) for k in COLLECTIVES)
            + " |"
        )
    if result.pipeline:
        p = result.pipeline
        lines.append(
            f"\npipeline at {result.num_layers} layers: {p['stages']} stages of "
            f"{p['blocks_per_stage']}, {p['micro_batches']} micro batches of "
            f"{p['sequences_per_micro_batch']} sequences per pass, {p['repeats']} repeat(s): "
            f"stages idle {p['bubble_fraction']:.1%} of each pass; the memory above is per "
            "device, the same on every stage"
        )
    return "\n".join(lines)
