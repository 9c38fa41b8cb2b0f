"""The range of every numeric setting, in one table, checked before anything is built.

`check_ranges(cfg)` walks the whole config: every float must be finite, and every number whose
key is in `RANGES` must lie in its range; the first that does not is a ConfigError naming the key,
the value and the range. Relations between settings (min_lr <= lr, a micro batch dividing the
global one, heads divisible by kv heads, ...) are checked after this, by `config.validate` and
`ModelSpec.validate`, so a value that is wrong on its own is always reported under its own key.

The `model.*` ranges and the rule itself (`Range`, `check_number`) are the model spec's
(`jaxtrain.models.spec.ranges`): a spec is also built without a config, and checks them there.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.models.spec.ranges import (
    COUNT,
    MODEL_RANGES,
    NON_NEGATIVE,
    POSITIVE,
    Range,
    check_number,
)

FRACTION = Range(0, 1, high_open=True)
MESH_SIZE = Range(1, also=-1, hint="-1: the rest of the devices on that side")
MESH_AXES = ("data", "pipeline", "fsdp", "context", "expert", "tensor")

RANGES: dict[str, Range] = {
    "run.seed": Range(),
    "train.steps": COUNT,
    "train.seq_len": COUNT,
    "train.global_batch_size": COUNT,
    "train.micro_batch_size": Range(0, hint="0: the global batch, no accumulation"),
    "train.z_loss": Range(0, hint="0: off"),
    "train.loss_chunks": Range(0, hint="0: all logits at once"),
    "train.pipeline_microbatches": Range(0, hint="0: up to 4 x the pipeline stages"),
    "train.pipeline_repeats": COUNT,
    "train.log_every": Range(1, hint="steps between metric lines"),
    "train.eval_every": Range(0, hint="0: no periodic validation"),
    "train.eval_batches": Range(0, hint="0: no validation"),
    "eval.harness_every": Range(0, hint="0: no harness evaluation"),
    "eval.harness_limit": Range(0, hint="0: every example of each task"),
    "eval.harness_fewshot": Range(-1, hint="-1: each task's default"),
    "train.peak_flops": Range(0, hint="0: the known-GPU table or a measured rate"),
    "train.profile_start": Range(0, hint="0: no profiler trace"),
    "train.profile_steps": COUNT,
    "train.hang_timeout": Range(0, hint="seconds; 0: no hang watch"),
    "train.straggler_every": Range(0, hint="0: never compare the hosts"),
    "train.straggler_patience": COUNT,
    "train.straggler_fraction": Range(0, 1, hint="share of the fastest host's device rate"),
    "optim.lr": POSITIVE,
    "optim.min_lr": NON_NEGATIVE,
    "optim.warmup_steps": NON_NEGATIVE,
    "optim.decay_steps": Range(0, hint="0: train.steps"),
    "optim.warmup_init": NON_NEGATIVE,
    "optim.warmup_offset": Range(
        0, 1, hint="0: the first step runs at warmup_init; 1: it already moves toward lr"
    ),
    "optim.stable_steps": NON_NEGATIVE,
    "optim.weight_decay": NON_NEGATIVE,
    "optim.b1": FRACTION,
    "optim.b2": FRACTION,
    "optim.eps": POSITIVE,
    "optim.clip_grad_norm": Range(0, hint="0: no clipping"),
    "data.worker_count": Range(0, hint="0: read in the training process"),
    "data.prefetch": NON_NEGATIVE,
    "checkpoint.every": Range(0, hint="0: only at the end"),
    "checkpoint.keep": Range(0, hint="0: keep every checkpoint"),
    "checkpoint.keep_every": Range(0, hint="0: off"),
    "checkpoint.every_minutes": Range(0, hint="0: off"),
    "checkpoint.init_step": Range(0, also=-1, hint="-1: the latest step"),
    "checkpoint.resume_step": Range(0, also=-1, hint="-1: the latest step"),
    "sample.max_new_tokens": NON_NEGATIVE,
    "sample.temperature": Range(0, hint="0: greedy"),
    "sample.top_k": Range(0, hint="0: all tokens"),
    **{f"mesh.{side}_{axis}": MESH_SIZE for side in ("ici", "dcn") for axis in MESH_AXES},
    # The model's ranges are the spec's own: a ModelSpec built from a Hugging Face config.json,
    # a preset or a saved run passes them too, without a config.
    **{f"model.{key}": rule for key, rule in MODEL_RANGES.items()},
}


def numeric_settings(tree: Any, prefix: str = ""):
    """(dotted key, value) of every int or float leaf (bools excluded) under `tree`."""
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if hasattr(value, "items"):
            yield from numeric_settings(value, f"{name}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield name, value


def check_ranges(cfg: Any) -> None:
    """Raises ConfigError for the first number that is not finite or lies outside its range."""
    for key, value in numeric_settings(cfg):
        check_number(key, value, RANGES.get(key, Range()))
