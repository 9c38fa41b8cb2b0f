"""Where a source stack's pipeline goes in jaxtrain: its stages on the `pipeline` mesh axis,
its micro batches in pipeline passes. Each stack's `pipeline.py` reads that stack's own keys.

What the stacks mean, and what jaxtrain does:

- The pipeline size becomes `mesh.dcn_pipeline` as far as it spans hosts (Megatron and
  TorchTitan place pipeline ranks outermost, so stages are whole hosts first) and
  `mesh.ici_pipeline` for the rest.
- Virtual stages (Megatron's interleaved schedule, TorchTitan's looped schedules, MaxText's
  repeats) become `train.pipeline_repeats`: the same assignment of blocks to stages (stage s
  holds chunks s, s + S, ...).
- Megatron and TorchTitan run every micro batch of a step through one pipeline schedule
  (1F1B keeps at most S of them in flight per stage). jaxtrain's schedule holds the
  activations of all micro batches of a pass, so a pass takes up to S of the source's micro
  batches (its peak activation memory at the first stage) and gradient accumulation runs the
  rest; more per pass shrink the bubble at the cost of memory.
- Stage layouts the source may set (uneven first/last stages, explicit layouts, the embedding
  or loss counted as a layer) place blocks only; jaxtrain splits the stack into equal runs,
  and `config` / the trainer refuse, with the arithmetic, a stack that does not split.
"""

from __future__ import annotations

import math
from typing import Any

from jaxtrain.compat.common.report import KeyReport

STAGE_LAYOUT = (
    "where blocks sit on the stages only; jaxtrain splits the stack into equal, "
    "contiguous runs (the mesh check shows the arithmetic when it cannot)"
)


def split_over_hosts(pp: int, hosts: int) -> tuple[int, int]:
    """(ici, dcn) pipeline sizes: stages span whole hosts first."""
    dcn = math.gcd(pp, max(hosts, 1))
    return pp // dcn, dcn


def place(r: KeyReport, s: dict[str, Any], key: str, pp: int) -> None:
    """Sets the mesh's pipeline sizes for a pipeline of `pp` stages from `key`."""
    ici, dcn = split_over_hosts(pp, r.num_hosts)
    s["mesh.ici_pipeline"], s["mesh.dcn_pipeline"] = ici, dcn
    if dcn > 1:
        # The remaining hosts (if any) replicate the pipeline: data parallel across them.
        s["mesh.dcn_data"] = -1
    where = []
    if dcn > 1:
        where.append(f"mesh.dcn_pipeline={dcn} (across {r.num_hosts} hosts)")
    if ici > 1 or dcn == 1:
        where.append(f"mesh.ici_pipeline={ici}")
    r.mapped(
        key,
        "mesh.ici_pipeline, mesh.dcn_pipeline",
        " x ".join(where)
        + ("" if pp == 1 else ": the stacked blocks split into equal, contiguous runs per stage"),
    )


def micro_batches_per_pass(n: int, stages: int) -> int:
    """How many of the source's `n` micro batches of a step one jaxtrain pipeline pass takes:
    the most, up to `stages`, that divide `n`."""
    return max(m for m in range(1, min(n, stages) + 1) if n % m == 0)


def batch_per_pass(
    r: KeyReport, s: dict[str, Any], pp: int, rows_per_micro: int, n: int, key: str
) -> None:
    """train.micro_batch_size and train.pipeline_microbatches when `n` micro batches of
    `rows_per_micro` sequences (all data-parallel ranks together) make up a step."""
    if pp <= 1:
        return
    m = micro_batches_per_pass(n, pp)
    s["train.micro_batch_size"] = rows_per_micro * m
    s["train.pipeline_microbatches"] = m
    r.mapped(
        key,
        "train.micro_batch_size, train.pipeline_microbatches",
        f"{n} micro batches of {rows_per_micro} sequences per step through {pp} stages: "
        f"{m} per pipeline pass (the source's peak activations at its first stage), "
        f"{n // m} passes accumulated; bubble (S-1)/(M+S-1) = {pp - 1}/{m + pp - 1}. "
        "More per pass (train.pipeline_microbatches with train.micro_batch_size) shrink "
        "the bubble and grow activation memory",
    )
