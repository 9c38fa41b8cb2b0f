"""The collectives of an optimised HLO program: how many bytes each moves, how often it runs,
and which mesh axes its device groups span.

`count_collectives` (planning/compile.py) counts instructions; a cost model needs more:

- bytes: from the instruction's result shape (a tuple for combined collectives), turned into
  the bytes each device sends with the ring algorithms NCCL and RCCL use (`bus_bytes`);
- how often: a collective inside a `while` body (the scanned layers, the micro-batch loop)
  runs `known_trip_count` times per step, which XLA writes into the loop's backend config;
- which axes: the first replica group (listed, iota `[G,S]<=[dims]T(perm)`, or
  `mesh[...] {axes}` form) or the first source-target pair of a permute, as logical device
  ids, mapped back to mesh coordinates. The ids index the mesh's devices in row-major order,
  so the axes along which they vary are the axes the collective crosses, and the planner
  knows which of those span hosts.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

from jaxtrain.planning import hlo_text
from jaxtrain.planning.compile import COLLECTIVES

_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.+?)\s+(" + "|".join(COLLECTIVES) + r")(-start)?\("
)
_SHAPE = re.compile(hlo_text.ARRAY_TYPE)
_LISTED = re.compile(r"replica_groups=\{\{([\d,\s]*)\}")
_IOTA = re.compile(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_MESH = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_PAIRS = re.compile(r"source_target_pairs=\{\{(\d+),(\d+)\}")


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instruction of the program."""

    kind: str  # all-gather, reduce-scatter, all-reduce, all-to-all, collective-permute
    result_bytes: int  # per device
    group: tuple[int, ...]  # the logical device ids of its first group (or permute pair)
    runs: float  # times per step (product of the trip counts of the loops around it)

    @property
    def bus_bytes(self) -> float:
        """Bytes one device sends per run, with ring algorithms over the group."""
        g = max(len(self.group), 1)
        r = self.result_bytes
        if self.kind == "all-gather" or self.kind == "all-to-all":
            return r * (g - 1) / g
        if self.kind == "reduce-scatter":  # the operand is g results
            return r * (g - 1)
        if self.kind == "all-reduce":  # a reduce-scatter then an all-gather
            return 2 * r * (g - 1) / g
        return float(r)  # collective-permute: each device sends its buffer once


def _dtype_bytes(dtype: str) -> int:
    if dtype == "pred":
        return 1
    bits = re.search(r"(\d+)", dtype)
    return max(int(bits.group(1)) // 8, 1) if bits else 4


def _result_bytes(result: str, kind: str, started: bool) -> int:
    sizes = [
        math.prod(hlo_text.dims(dims)) * _dtype_bytes(dtype)
        for dtype, dims in _SHAPE.findall(result)
    ]
    if not sizes:
        return 0
    # An async `-start` returns (operands, results, [context]): the largest is the result for
    # a gather, and any one of the buffers for the others (same size in and out).
    if started:
        return max(sizes)
    return sum(sizes)


def _group(line: str) -> tuple[int, ...]:
    if m := _LISTED.search(line):
        return tuple(int(x) for x in m.group(1).replace(" ", "").split(",") if x)
    if m := _IOTA.search(line):
        groups, size = int(m.group(1)), int(m.group(2))
        dims = [int(x) for x in m.group(3).split(",")]
        ids = np.arange(math.prod(dims)).reshape(dims)
        if m.group(4):
            ids = ids.transpose([int(x) for x in m.group(4).split(",")])
        return tuple(int(x) for x in ids.reshape(groups, size)[0])
    if m := _MESH.search(line):
        axes = re.findall(r"'([^']+)'=(\d+)", m.group(1))
        chosen = set(re.findall(r"'([^']+)'", m.group(2)))
        ids = np.arange(math.prod(int(n) for _, n in axes)).reshape([int(n) for _, n in axes])
        index = tuple(slice(None) if name in chosen else 0 for name, _ in axes)
        return tuple(int(x) for x in np.asarray(ids[index]).ravel())
    if m := _PAIRS.search(line):
        return (int(m.group(1)), int(m.group(2)))
    return ()  # replica_groups={}: every device


def collectives(hlo: str) -> list[Collective]:
    """Every collective of an optimised HLO module with its bytes, group and runs per step."""
    bodies, entry = hlo_text.computations(hlo)
    runs = hlo_text.runs_per_computation(bodies, entry) if entry else {}
    found = []
    for name, lines in bodies.items():
        for line in lines:
            m = _INSTRUCTION.match(line)
            if not m or not runs.get(name):
                continue
            result, kind, started = m.group(1), m.group(2), bool(m.group(3))
            found.append(
                Collective(kind, _result_bytes(result, kind, started), _group(line), runs[name])
            )
    return found


def axes_crossed(group: Sequence[int], mesh: Mapping[str, int]) -> tuple[str, ...]:
    """The mesh axes along which the devices of `group` differ (all axes for an empty group,
    which XLA prints for "every device")."""
    names = list(mesh)
    shape = [mesh[a] for a in names]
    if not group:
        return tuple(a for a in names if mesh[a] > 1)
    coords = np.array(np.unravel_index(np.asarray(group) % math.prod(shape), shape))
    return tuple(a for a, row in zip(names, coords) if len(set(row.tolist())) > 1)


def summarise(found: Sequence[Collective], mesh: Mapping[str, int]) -> dict[str, dict[str, float]]:
    """{"kind over axes": {"bus_bytes": per step per device, "runs": per step}}: what the cost
    model needs, small enough to cache and to extrapolate in depth."""
    out: dict[str, dict[str, float]] = {}
    for c in found:
        axes = axes_crossed(c.group, mesh)
        if not axes:  # a group of one device moves nothing
            continue
        key = f"{c.kind} over {'+'.join(axes)}"
        entry = out.setdefault(key, {"bus_bytes": 0.0, "runs": 0.0})
        entry["bus_bytes"] += c.bus_bytes * c.runs
        entry["runs"] += c.runs
    return out
