"""The structure of an optimised HLO program's text: its computations and how often each runs.

A compiled step prints as computations (the entry, loop bodies and conditions, fused
computations, reducers), each a list of instruction lines. What the cost model reads from an
instruction (a collective's bytes, a dot's FLOPs) counts once per run of the computation
holding it: a `while` body runs `known_trip_count` times per run of its caller, which XLA
writes into the loop's backend config; any other callee runs once per run of its caller.
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
# An array type, `f32[8,16]` or `pred[4]`: its element type, then its dimensions.
ARRAY_TYPE = r"\b(pred|[a-z]+\d+[a-z0-9]*)\[([\d,]*)\]"
# `%name = f32[8,16]{1,0} opcode(...)`: an instruction with an array result.
_ARRAY_RESULT = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*" + ARRAY_TYPE)


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


def runs_per_computation(bodies: Mapping[str, list[str]], entry: str) -> dict[str, int]:
    """How many times each computation runs per execution of the entry computation."""
    runs = dict.fromkeys(bodies, 0)
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
            trip = _TRIP.search(line)
            for callee in callees:
                factor = int(trip.group(1)) if body and trip and callee == body.group(1) else 1
                if callee in runs:
                    runs[callee] += runs[name] * factor
    return runs


def dims(text: str) -> tuple[int, ...]:
    """The dimensions of an array type's `[8,16]` part, given its inside: (8, 16)."""
    return tuple(int(d) for d in text.split(",") if d)


def array_shapes(lines: list[str]) -> dict[str, tuple[int, ...]]:
    """{instruction name: its result's dimensions} for the array-valued instructions of one
    computation (parameters included): operands are printed by name only."""
    shapes = {}
    for line in lines:
        if m := _ARRAY_RESULT.match(line):
            shapes[m.group(1)] = dims(m.group(3))
    return shapes
