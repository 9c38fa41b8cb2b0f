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
the micro batches, the tiles), so this walks the program (`hlo_text`) and counts every product
as 2 x (result elements) x (contracted elements) per run of the computation holding it. A
product is a `dot`, or on GPUs a custom call to the BLAS library (`__cublas$gemm`,
`__cublas$lt$matmul`, `__cublas$lt$matmul$f8`: XLA's targets for cuBLAS and, on ROCm, for
rocBLAS / hipBLASLt), whose contracted dimensions are in its backend config.
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
# `= (bf16[8192,14336]{1,0}, s8[4194304]{0}) custom-call(%lhs, %rhs),
# custom_call_target="__cublas$gemm", backend_config={..."lhs_contracting_dimensions":["1"]...`:
# the result (first in the tuple, with the library's workspace after it) and the operands as
# for a dot.
_GEMM = re.compile(
    r"=\s*\(?"
    + hlo_text.ARRAY_TYPE
    + r"[^=]*?\s+custom-call\((?:"
    + hlo_text.ARRAY_TYPE
    + r"\S*\s+)?%?([\w.\-]+)[,)].*?custom_call_target=\"__cublas\$[^\"]*\""
    r".*?\"lhs_contracting_dimensions\":\[([^\]]*)\]"
)


def _product(line: str) -> re.Match | None:
    """The match of a product on `line`: (result type, its dims, the lhs's printed type and
    dims or None, the lhs's name, its contracted dimensions), or None."""
    return _DOT.search(line) or _GEMM.search(line)


def dot_flops(hlo: str) -> float:
    """FLOPs of every product of an optimised HLO module, per execution (per device)."""
    bodies, entry = hlo_text.computations(hlo)
    if not entry:
        return 0.0
    runs = hlo_text.runs_per_computation(bodies, entry)
    own = _own_dot_flops(bodies, [name for name in bodies if runs.get(name)])
    return sum(flops * runs[name] for name, flops in own.items())


def module_name(hlo: str) -> str:
    """The module's name (`HloModule jit_train_step, ...`), as a profiler trace gives it."""
    return m.group(1) if (m := _MODULE.search(hlo)) else ""


def op_flops(hlo: str) -> dict[str, float]:
    """{instruction name: the FLOPs of one run of it} for every product, and every fusion
    whose fused computation holds products, of an optimised HLO module: the names a profiler trace
    gives the operations it timed (`rundir/trace_ops.py`)."""
    bodies, _ = hlo_text.computations(hlo)
    own = _own_dot_flops(bodies, list(bodies))
    found = {}
    for lines in bodies.values():
        shapes = None
        for line in lines:
            if not (m := _INSTRUCTION.match(line)):
                continue
            name, rest = m.groups()
            if _product(line):
                shapes = shapes if shapes is not None else hlo_text.array_shapes(lines)
                found[name] = _line_dot_flops(line, shapes)
            elif " fusion(" in rest and (callee := _CALLS.search(rest)):
                if own.get(callee.group(1)):
                    found[name] = own[callee.group(1)]
    return found


_MODULE = re.compile(r"^HloModule\s+([\w.\-]+)", re.MULTILINE)
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_CALLS = re.compile(r"\bcalls=%?([\w.\-]+)")


def _own_dot_flops(bodies: dict[str, list[str]], names: list[str]) -> dict[str, float]:
    """{computation: FLOPs of the products written in it, per run of it} for `names`."""
    found = {}
    for name in names:
        lines = bodies[name]
        dots = [line for line in lines if _product(line)]
        shapes = hlo_text.array_shapes(lines) if dots else {}
        found[name] = sum(_line_dot_flops(line, shapes) for line in dots)
    return found


def _line_dot_flops(line: str, shapes: dict[str, tuple[int, ...]]) -> float:
    """2 x result elements x contracted elements of the product on `line`; 0 where its lhs's
    shape is unknown (an operand defined elsewhere: not in optimised HLO's printing)."""
    _, result, _, inline_lhs, lhs_name, contracting = _product(line).groups()
    lhs = hlo_text.dims(inline_lhs) if inline_lhs is not None else shapes.get(lhs_name)
    if lhs is None:
        return 0.0
    contracted = math.prod(lhs[i] for i in hlo_text.dims(contracting.replace('"', "")))
    return 2.0 * math.prod(hlo_text.dims(result)) * contracted
