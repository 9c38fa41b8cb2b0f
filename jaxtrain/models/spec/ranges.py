"""The range of every numeric model hyperparameter, and the one rule that checks a number
against its range.

A model's numbers are checked here, by the spec, because a `ModelSpec` is also built where no
config is: from a Hugging Face config.json, a preset of the registry, or the model section a run
saved. `jaxtrain.config.ranges` takes the `model.*` entries of its table from `MODEL_RANGES`, so
a config reports a bad model value under its key before any other check, with the same words.
Relations between fields (heads divisible by kv heads, a size needed only when a feature is on)
are `checks`'.
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


def check_number(key: str, value: float, rule: Range) -> None:
    """ConfigError naming `key` when `value` is not finite (floats) or lies outside `rule`."""
    hint = f" ({rule.hint})" if rule.hint else ""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(
            f"{key}={value} is not a finite number; it must be {rule.describe()}{hint}."
        )
    if not rule.admits(value):
        raise ConfigError(f"{key}={value!r} is out of range: it must be {rule.describe()}{hint}.")


# Keyed by ModelSpec field (the config key without "model.").
MODEL_RANGES: dict[str, Range] = {
    **{
        key: COUNT
        for key in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "max_seq_len",
            "num_experts_per_tok",
            "moe_n_group",
            "moe_topk_group",
            "moe_layer_step",
        )
    },
    **{
        key: POSITIVE
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
        key: NON_NEGATIVE
        for key in (
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
            "linear_num_key_heads",
            "linear_num_value_heads",
        )
    },
    "rope_original_max_len": Range(1, hint="the pretraining context of llama3 / yarn scaling"),
    **{key: Range(0, hint="0: not set") for key in ("rope_mscale", "rope_mscale_all_dim")},
    "moe_capacity_factor": Range(0, hint="0: dropless routing; 1.25 is a common capacity"),
    **{
        key: COUNT for key in ("linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel")
    },
    "linear_chunk": Range(0, hint="0: the mixer's default"),
    "partial_rotary_factor": Range(0, 1, low_open=True, hint="1: RoPE on the whole head"),
    "sliding_window": Range(0, hint="0: full causal attention"),
    "attention_chunk": Range(0, hint="0: off"),
    "global_layer_step": Range(0, hint="0: every block alike"),
    "leading_global_layers": Range(0, hint="0: no leading global blocks"),
    "attention_block": Range(0, hint="0: chosen by device and sequence length"),
    "num_experts": Range(0, hint="0: a dense MLP"),
    "attn_scale": Range(),
    "fp8_amax_history": Range(1, hint="steps of amax history of delayed scaling"),
    "fp8_margin": Range(0, 8, hint="powers of two of headroom below the fp8 maximum"),
    # Grok's soft-caps and multipliers (0 / 1: off).
    **{
        key: Range(0, hint="0: off")
        for key in (
            "attn_logit_softcap",
            "router_logit_softcap",
            "final_logit_softcap",
            "attn_temperature_len",
        )
    },
    **{
        key: Range(0, low_open=True, hint="1: off")
        for key in ("embed_multiplier", "output_multiplier")
    },
    "query_pre_attn_scalar": Range(0, hint="0: head_dim"),
    "rope_local_theta": Range(0, hint="0: rope_theta on every block"),
    "learned_positions": Range(0, hint="0: rotary positions"),
    # State-space (Mamba) sublayers.
    "mamba_version": Range(1, 2, hint="1: Mamba-1, 2: Mamba-2"),
    **{
        key: COUNT
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
        key: Range(0, hint="0: derived from the other sizes")
        for key in ("ssm_num_heads", "ssm_dt_rank")
    },
    **{key: POSITIVE for key in ("ssm_dt_min", "ssm_dt_max", "ssm_dt_floor")},
    **{key: Range(0, hint="0: no clamp") for key in ("ssm_dt_limit_min", "ssm_dt_limit_max")},
}


def check_model_ranges(spec: Any) -> None:
    """ConfigError for the first numeric field of `spec` (a ModelSpec) outside its range."""
    for field in dataclasses.fields(spec):
        value = getattr(spec, field.name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            check_number(f"model.{field.name}", value, MODEL_RANGES.get(field.name, Range()))
