"""Pipeline-parallel settings of Megatron-LM, TorchTitan and MaxText -> jaxtrain's `pipeline`
mesh axis and `train.pipeline_microbatches` / `train.pipeline_repeats`.

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

from jaxtrain.compat.common.report import KeyReport, is_off

_LAYOUT = (
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


def megatron(r: KeyReport, s: dict[str, Any], pp: int, micro: int, dp: int) -> None:
    """Megatron's pipeline keys (`pipeline_model_parallel_size` and virtual stages)."""
    place(r, s, "pipeline_model_parallel_size", pp)
    if pp > 1:
        n = int(r.get("global_batch_size")) // (micro * dp)
        batch_per_pass(r, s, pp, micro * dp, n, "micro_batch_size")
    layers = int(r.get("num_layers") or 0)
    virtual = r.get("virtual_pipeline_model_parallel_size")
    for key in ("num_virtual_stages_per_pipeline_rank", "virtual_pipeline_model_parallel_size"):
        if not is_off(r.get(key)):
            virtual = int(r.get(key))
            s["train.pipeline_repeats"] = virtual
            r.mapped(
                key,
                "train.pipeline_repeats",
                "virtual stages per rank: each micro "
                "batch passes every stage that many times (stage s holds chunks s, s + "
                "S, ...)",
            )
    per_virtual = r.get("num_layers_per_virtual_pipeline_stage")
    if not is_off(per_virtual) and pp > 1:
        virtual = max(layers // (pp * int(per_virtual)), 1)
        s["train.pipeline_repeats"] = virtual
        r.mapped(
            "num_layers_per_virtual_pipeline_stage",
            "train.pipeline_repeats",
            f"{layers} layers / ({pp} stages x {per_virtual}) = {virtual} virtual stages per rank",
        )
    for key in (
        "num_layers_per_virtual_pipeline_stage",
        "num_virtual_stages_per_pipeline_rank",
        "virtual_pipeline_model_parallel_size",
    ):
        if r.has(key) and not r.handled(key):
            r.ignored(key, "unset: no virtual stages" if pp > 1 else "no pipeline")
    for key in (
        "decoder_first_pipeline_num_layers",
        "decoder_last_pipeline_num_layers",
        "pipeline_model_parallel_layout",
        "account_for_embedding_in_pipeline_split",
        "account_for_loss_in_pipeline_split",
        "pipeline_model_parallel_split_rank",
    ):
        if r.has(key):
            r.ignored(key, _LAYOUT if not is_off(r.get(key)) else "unset: equal stages")


def torchtitan(r: KeyReport, s: dict[str, Any], pp: int, local: int, batch_degree: int) -> None:
    """TorchTitan's `parallelism.pipeline_parallel_*` keys."""
    place(r, s, "parallelism.pipeline_parallel_degree", pp)
    prefix = "parallelism.pipeline_parallel_"
    if pp > 1:
        size = int(r.get(prefix + "microbatch_size") or 1)
        batch_per_pass(
            r, s, pp, size * batch_degree, max(local // size, 1), prefix + "microbatch_size"
        )
        schedule = str(r.get(prefix + "schedule") or "1F1B")
        per_stage = r.get(prefix + "layers_per_stage")
        looped = schedule.lower() in (
            "interleaved1f1b",
            "loopedbfs",
            "interleavedzerobubble",
            "zbvzerobubble",
            "dualpipev",
        )
        layers = int(s.get("model.num_layers") or 0)
        if not is_off(per_stage) and layers:
            repeats = max(layers // (pp * int(per_stage)), 1)
            s["train.pipeline_repeats"] = repeats
            r.mapped(
                prefix + "layers_per_stage",
                "train.pipeline_repeats",
                f"{layers} layers / ({pp} ranks x {per_stage}) = {repeats} stages per rank",
            )
        elif looped:
            s["train.pipeline_repeats"] = 2
        r.mapped(
            prefix + "schedule",
            "train.pipeline_repeats",
            f"{schedule}: "
            + (
                "looped, stages per rank as train.pipeline_repeats (2 unless layers_per_stage says)"
                if looped
                else "one stage per rank"
            )
            + "; jaxtrain runs every forward "
            "first and the backward in reverse (autodiff), the bubble is the same",
        )
    for key in r.under("parallelism"):
        if key.startswith(prefix) and not r.handled(key):
            r.ignored(
                key,
                _LAYOUT
                if key.endswith("_less_layers")
                else "pipeline detail"
                if pp > 1
                else "no pipeline",
            )
    if r.has("parallelism.module_fqns_per_model_part"):
        r.ignored("parallelism.module_fqns_per_model_part", _LAYOUT)


def maxtext(r: KeyReport, s: dict[str, Any], units: int) -> None:
    """MaxText's pipeline keys (the mesh sizes are mapped with the other axes)."""
    stages = int(s.get("mesh.ici_pipeline", 1)) * int(s.get("mesh.dcn_pipeline", 1))
    micro = int(r.get("num_pipeline_microbatches", -1))
    if stages > 1:
        s["train.pipeline_microbatches"] = stages if micro == -1 else micro
        r.mapped(
            "num_pipeline_microbatches",
            "train.pipeline_microbatches",
            f"-1: the number of stages ({stages})" if micro == -1 else "",
        )
        per_stage = int(r.get("num_layers_per_pipeline_stage", 1))
        repeats = int(r.get("num_pipeline_repeats", -1))
        if repeats == -1:
            repeats = max(units // (stages * per_stage), 1)
        s["train.pipeline_repeats"] = repeats
        r.mapped(
            "num_pipeline_repeats",
            "train.pipeline_repeats",
            f"-1: {units} pipelined blocks / ({stages} stages x {per_stage} per stage) = {repeats}"
            if int(r.get("num_pipeline_repeats", -1)) == -1
            else "",
        )
        r.mapped("num_layers_per_pipeline_stage", "train.pipeline_repeats")
        if repeats > 1:
            r.note(
                f"pipeline repeats {repeats}: jaxtrain keeps checkpoints in block order, so "
                "it reorders the stage weights once per step for the circular schedule "
                "(MaxText stores them in that order); train.pipeline_repeats=1 avoids it "
                "at a larger bubble"
            )
    layers = r.get("pipeline_parallel_layers", -1)
    if stages > 1 and int(layers) != -1:
        r.unsupported(
            "pipeline_parallel_layers",
            "pipelining part of the stack (the rest with "
            "`stage` as data parallelism) is not implemented",
        )
    for key in (
        "num_pipeline_microbatches",
        "num_pipeline_repeats",
        "num_layers_per_pipeline_stage",
        "pipeline_parallel_layers",
    ):
        if r.has(key) and not r.handled(key):
            r.ignored(key, "no pipeline")
