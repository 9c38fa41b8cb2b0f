"""MaxText's pipeline keys (`num_pipeline_microbatches`, `num_pipeline_repeats`, ...) ->
`train.pipeline_microbatches` and `train.pipeline_repeats`; the stage count comes from the
mesh sizes, mapped with the other axes."""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport


def _pipelined_blocks(s: dict[str, Any]) -> int:
    """The scanned units a pipeline splits: the blocks, the expert blocks after leading dense
    ones, or the groups of interleaved dense and expert blocks (as MaxText pipelines them)."""
    layers, step = int(s["model.num_layers"]), int(s.get("model.moe_layer_step", 1) or 1)
    if not s.get("model.num_experts"):
        return layers
    return layers // step if step > 1 else layers - int(s.get("model.num_dense_layers", 0))


def map_pipeline(r: KeyReport, s: dict[str, Any]) -> None:
    """MaxText's pipeline keys (the mesh sizes are mapped with the other axes)."""
    units = _pipelined_blocks(s)
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
