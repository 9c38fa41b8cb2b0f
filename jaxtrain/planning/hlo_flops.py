"""The matrix-multiply FLOPs an optimised HLO program executes per step.

jaxtrain's formula (`ModelSpec.flops_per_token`) counts what a model needs; the program may
execute more, and on the devices that run it that is what takes the time:

- rematerialisation recomputes forward products;
- a grouped matmul lowered to dense products multiplies every row of its buffer: with one
  expert per device, the ragged product over all gathered rows runs the whole buffer, though
  only that expert's rows are filled (mixtral_debug on 8 CPU devices: 1.7x the dot FLOPs of
  fsdp=4 x tensor=2 at expert=4 x tensor=2);
- a tiled grouped matmul pads every group to whole tiles;
- attention computed as products multiplies the masked half of a causal score matrix.

XLA's own cost analysis counts a loop body once whatever its trip count (the scanned layers,
the micro batches, the tiles), so this walks the program (`hlo_text`) and counts every `dot`
as 2 x (result elements) x (contracted elements) per run of the computation holding it.
"""

from __future__ import annotations

import math
import re

from jaxtrain.planning import hlo_text

# `= f32[64,48]{1,0} dot(%lhs, %rhs), lhs_contracting_dims={1}, ...`; operands may also be
# printed with their shapes (`dot(f32[64,32]{1,0} %lhs, ...)`), which then give the lhs's.
_DOT = re.compile(
    r"=\s*" + hlo_text.ARRAY_TYPE + r"\S*\s+dot\((?:" + hlo_text.ARRAY_TYPE + r"\S*\s+)?"
    r"%?([\w.\-]+),.*?lhs_contracting_dims=\{([\d,]*)\}"
)


def dot_flops(hlo: str) -> float:
    """FLOPs of every dot of an optimised HLO module, per execution (per device)."""
    bodies, entry = hlo_text.computations(hlo)
    if not entry:
        return 0.0
    runs = hlo_text.runs_per_computation(bodies, entry)
    total = 0.0
    for name, lines in bodies.items():
        if not runs.get(name):
            continue
        shapes = None
        for line in lines:
            m = _DOT.search(line)
            if not m:
                continue
            _, result, _, inline_lhs, lhs_name, contracting = m.groups()
            if inline_lhs is not None:
                lhs = hlo_text.dims(inline_lhs)
            else:
                shapes = shapes if shapes is not None else hlo_text.array_shapes(lines)
                lhs = shapes.get(lhs_name)
            if lhs is None:
                continue  # an operand defined elsewhere: not in optimised HLO's printing
            contracted = math.prod(lhs[i] for i in hlo_text.dims(contracting))
            total += 2.0 * math.prod(hlo_text.dims(result)) * contracted * runs[name]
    return total
