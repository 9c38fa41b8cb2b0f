"""The structure of an optimised HLO program's text: its computations and how often each runs.

A compiled step prints as computations (the entry, loop bodies and conditions, fused
computations, reducers), each a list of instruction lines. What the cost model reads from an
instruction (a collective's bytes, a dot's FLOPs) counts once per run of the computation
holding it: a `while` body runs `known_trip_count` times per run of its caller, which XLA
writes into the loop's backend config; any other callee runs once per run of its caller.

A loop whose trip count depends on the data has no `known_trip_count`. Where its trips over
all runs of its caller are bounded, the loop states the bound in its name scope (carried into
the instruction's `op_name`): `mean_trips_T_per_R`, T trips over the R runs of its caller, so
its body counts T / R times per run (the experts' tiles, `models/layers/grouped_matmul.py`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_CALLEE = re.compile(
    r"\b(?:calls|to_apply|body|condition|true_computation|false_computation)=%?([\w.\-]+)"
)
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_WHILE_BODY = re.compile(r"\bbody=%?([\w.\-]+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_MEAN_TRIPS = re.compile(r"\bmean_trips_(\d+)_per_(\d+)\b")
# An array type, `f32[8,16]` or `pred[4]`: its element type, then its dimensions.
ARRAY_TYPE = r"\b(pred|[a-z]+\d+[a-z0-9]*)\[([\d,]*)\]"
# `%name = f32[8,16]{1,0} opcode(...)`: an instruction with an array result.
_ARRAY_RESULT = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*" + ARRAY_TYPE)
_FIRST_RESULT = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*\(?" + ARRAY_TYPE)


def computations(hlo_text: str) -> tuple[dict[str, list[str]], str]:
    """{computation name: its instruction lines}, and the entry computation's name."""
    bodies: dict[str, list[str]] = {}
    entry, current = "", None
    for line in hlo_text.splitlines():
        if current is None:
            if (m := _HEADER.match(line)) and not line.startswith(" "):
                current = m.group(1)
                bodies[current] = []
                if line.startswith("ENTRY"):
                    entry = current
        elif line.strip() == "}":
            current = None
        else:
            bodies[current].append(line)
    return bodies, entry


def runs_per_computation(bodies: Mapping[str, list[str]], entry: str) -> dict[str, float]:
    """How many times each computation runs per execution of the entry computation (a mean,
    for the bodies of loops that state their mean trips)."""
    runs: dict[str, float] = dict.fromkeys(bodies, 0)
    runs[entry] = 1
    # Callees are printed before their callers, so callers come first in reverse order.
    for name in reversed(list(bodies)):
        if not runs[name]:
            continue
        for line in bodies[name]:
            callees = _CALLEE.findall(line)
            if m := _BRANCHES.search(line):
                callees += [c.strip().lstrip("%") for c in m.group(1).split(",")]
            body = _WHILE_BODY.search(line)
            for callee in callees:
                factor = _trips(line) if body and callee == body.group(1) else 1
                if callee in runs:
                    runs[callee] += runs[name] * factor
    return runs


def _trips(while_line: str) -> float:
    """Runs of a `while` body per run of the loop: XLA's known trip count, else the mean the
    loop states (module docstring), else 1."""
    if trip := _TRIP.search(while_line):
        return int(trip.group(1))
    if mean := _MEAN_TRIPS.search(while_line):
        return int(mean.group(1)) / int(mean.group(2))
    return 1


def dims(text: str) -> tuple[int, ...]:
    """The dimensions of an array type's `[8,16]` part, given its inside: (8, 16)."""
    return tuple(int(d) for d in text.split(",") if d)


def result_types(hlo_text: str) -> dict[str, str]:
    """{instruction name: its result's type, `f32[8,16]`} over every computation; of a tuple
    result, its first array (a library call's output, before its workspace)."""
    found = {}
    for line in hlo_text.splitlines():
        if m := _FIRST_RESULT.match(line):
            found[m.group(1)] = f"{m.group(2)}[{m.group(3)}]"
    return found


def array_shapes(lines: list[str]) -> dict[str, tuple[int, ...]]:
    """{instruction name: its result's dimensions} for the array-valued instructions of one
    computation (parameters included): operands are printed by name only."""
    shapes = {}
    for line in lines:
        if m := _ARRAY_RESULT.match(line):
            shapes[m.group(1)] = dims(m.group(3))
    return shapes
