"""TorchTitan's `parallelism.pipeline_parallel_*` keys -> the `pipeline` mesh axis,
`train.pipeline_microbatches` and `train.pipeline_repeats`."""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.pipeline_layout import STAGE_LAYOUT, batch_per_pass, place
from jaxtrain.compat.common.report import KeyReport, is_off


def map_pipeline(r: KeyReport, s: dict[str, Any], pp: int, local: int, batch_degree: int) -> None:
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
                STAGE_LAYOUT
                if key.endswith("_less_layers")
                else "pipeline detail"
                if pp > 1
                else "no pipeline",
            )
    if r.has("parallelism.module_fqns_per_model_part"):
        r.ignored("parallelism.module_fqns_per_model_part", STAGE_LAYOUT)
