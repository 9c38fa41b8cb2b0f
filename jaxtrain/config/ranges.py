"""The range of every numeric setting, in one table, checked before anything is built.

`check_ranges(cfg)` walks the whole config: every float must be finite, and every number whose
key is in `RANGES` must lie in its range; the first that does not is a ConfigError naming the key,
the value and the range. Relations between settings (min_lr <= lr, a micro batch dividing the
global one, heads divisible by kv heads, ...) are checked after this, by `config.validate` and
`ModelSpec.validate`, so a value that is wrong on its own is always reported under its own key.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from jaxtrain.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Range:
    """Allowed values: between `low` and `high` (each open or closed, None = unbounded), plus
    `also` (one value outside the bounds with a meaning of its own, e.g. -1 for a mesh size)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    also: int | None = None
    hint: str = ""  # what special values mean, shown in the message

    def admits(self, value: float) -> bool:
        """Whether `value` lies in the range."""
        if self.also is not None and value == self.also:
            return True
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self) -> str:
        """The range in words: '> 0', '>= 1 or -1', 'in [0, 1)', 'any finite number'."""
        if self.low is not None and self.high is not None:
            text = (
                f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                f"{')' if self.high_open else ']'}"
            )
        elif self.low is not None:
            text = f"{'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            text = f"{'<' if self.high_open else '<='} {self.high:g}"
        else:
            text = "any finite number"
        return text + (f" or {self.also}" if self.also is not None else "")


POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
COUNT = Range(1)  # a positive integer
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
    "train.peak_flops": Range(0, hint="0: the known-GPU table or a measured rate"),
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
    **{
        f"model.{key}": COUNT
        for key in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "max_seq_len",
            "rope_original_max_len",
            "num_experts_per_tok",
            "moe_n_group",
            "moe_topk_group",
            "moe_layer_step",
        )
    },
    **{
        f"model.{key}": POSITIVE
        for key in (
            "norm_eps",
            "rope_theta",
            "rope_factor",
            "rope_low_freq_factor",
            "rope_high_freq_factor",
            "rope_beta_fast",
            "rope_beta_slow",
            "attn_floor_scale",
            "moe_routed_scaling",
            "moe_swiglu_alpha",
            "moe_swiglu_limit",
        )
    },
    **{
        f"model.{key}": NON_NEGATIVE
        for key in (
            "rope_mscale",
            "rope_mscale_all_dim",
            "init_std",
            "kv_lora_rank",
            "q_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "v_head_dim",
            "moe_intermediate_size",
            "moe_shared_experts",
            "moe_shared_intermediate_size",
            "num_dense_layers",
            "moe_bias_update_rate",
            "moe_aux_loss_coef",
            "moe_z_loss_coef",
            "moe_capacity_factor",
            "linear_num_key_heads",
            "linear_num_value_heads",
        )
    },
    **{
        f"model.{key}": COUNT
        for key in ("linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel")
    },
    "model.linear_chunk": Range(0, hint="0: the mixer's default"),
    "model.sliding_window": Range(0, hint="0: full causal attention"),
    "model.attention_chunk": Range(0, hint="0: off"),
    "model.global_layer_step": Range(0, hint="0: every block alike"),
    "model.leading_global_layers": Range(0, hint="0: no leading global blocks"),
    "model.attention_block": Range(0, hint="0: chosen by device and sequence length"),
    "model.num_experts": Range(0, hint="0: a dense MLP"),
    "model.attn_scale": Range(),
    "model.fp8_amax_history": Range(1, hint="steps of amax history of delayed scaling"),
    "model.fp8_margin": Range(0, 8, hint="powers of two of headroom below the fp8 maximum"),
    # Grok's soft-caps and multipliers (0 / 1: off).
    **{
        f"model.{key}": Range(0, hint="0: off")
        for key in (
            "attn_logit_softcap",
            "router_logit_softcap",
            "final_logit_softcap",
            "attn_temperature_len",
        )
    },
    **{
        f"model.{key}": Range(0, low_open=True, hint="1: off")
        for key in ("embed_multiplier", "output_multiplier")
    },
    # State-space (Mamba) sublayers.
    "model.mamba_version": Range(1, 2, hint="1: Mamba-1, 2: Mamba-2"),
    **{
        f"model.{key}": COUNT
        for key in (
            "ssm_state_size",
            "ssm_head_dim",
            "ssm_expand",
            "ssm_n_groups",
            "ssm_conv_kernel",
            "ssm_chunk_size",
        )
    },
    **{
        f"model.{key}": Range(0, hint="0: derived from the other sizes")
        for key in ("ssm_num_heads", "ssm_dt_rank")
    },
    **{f"model.{key}": POSITIVE for key in ("ssm_dt_min", "ssm_dt_max", "ssm_dt_floor")},
    **{
        f"model.{key}": Range(0, hint="0: no clamp")
        for key in ("ssm_dt_limit_min", "ssm_dt_limit_max")
    },
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
        rule = RANGES.get(key, Range())
        hint = f" ({rule.hint})" if rule.hint else ""
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(
                f"{key}={value} is not a finite number; it must be {rule.describe()}{hint}."
            )
        if not rule.admits(value):
            raise ConfigError(
                f"{key}={value!r} is out of range: it must be {rule.describe()}{hint}."
            )
