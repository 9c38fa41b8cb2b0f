"""Megatron's pipeline keys (`pipeline_model_parallel_size`, virtual stages, stage layouts) ->
the `pipeline` mesh axis, `train.pipeline_microbatches` and `train.pipeline_repeats`."""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.pipeline_layout import STAGE_LAYOUT, batch_per_pass, place
from jaxtrain.compat.common.report import KeyReport, is_off


def map_pipeline(r: KeyReport, s: dict[str, Any], pp: int, micro: int, dp: int) -> None:
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
            r.ignored(key, STAGE_LAYOUT if not is_off(r.get(key)) else "unset: equal stages")
