"""Megatron's gated DeltaNet GPT layers (`experimental_attention_variant: gated_delta_net`, Primus'
qwen3_5 files) -> jaxtrain's `qwen3_5` / `qwen3_5_moe` families (Qwen3-Next's layout, see
`jaxtrain.models.presets.qwen3_next`).

Megatron-LM builds (N - 1) Gated DeltaNet layers then one attention layer for
`linear_attention_freq: N`, each followed by its MLP or experts; the switches of Qwen3-Next's
blocks map one to one:

    linear_attention_freq   -> model.block_pattern (two sublayers per layer)
    linear_*                -> model.linear_* (as `linear_attention` reads them)
    attention_output_gate   -> model.attn_output_gate
    apply_layernorm_1p      -> model.norm_zero_centered (every norm, q/k norms included)
    rotary_percent          -> model.partial_rotary_factor
    moe_shared_expert_gate  -> model.moe_shared_gate (`moe`)

Megatron names no architecture: a file with experts is `qwen3_5_moe`, one without `qwen3_5`
(Qwen3-Next's blocks are the same; only their Hugging Face layout differs).
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport
from jaxtrain.compat.megatron import linear_attention
from jaxtrain.errors import ConfigError
from jaxtrain.models.presets.qwen3_next import layer_pattern

VARIANT = "gated_delta_net"


def map_gated_delta_net(r: KeyReport, model: dict[str, Any]) -> None:
    """The hybrid layout, gated attention and Gated DeltaNet fields of a GPT model whose
    `experimental_attention_variant` is gated_delta_net (after the dense and expert keys)."""
    layers = int(model["num_layers"])
    freq = r.get("linear_attention_freq", 4)
    if isinstance(freq, bool) or not isinstance(freq, int) or freq < 1:
        raise ConfigError(
            f"{r.source}: linear_attention_freq={freq!r} is not supported; give an integer N "
            "(N - 1 gated DeltaNet layers per attention layer)."
        )
    experts = bool(model.get("num_experts"))
    sizes = {
        target: int(r.get(key, linear_attention.MEGATRON_DEFAULTS[key]))
        for key, target in linear_attention.SIZE_KEYS.items()
    }
    model.update(
        family="qwen3_5_moe" if experts else "qwen3_5",
        num_layers=2 * layers,
        block_pattern=layer_pattern(layers, "E" if experts else "-", freq),
        attn_output_gate=bool(r.get("attention_output_gate")),
        norm_zero_centered=bool(r.get("apply_layernorm_1p")),
        partial_rotary_factor=float(r.get("rotary_percent", 1.0)),
        num_dense_layers=0,
        moe_layer_step=1,
        **sizes,
    )
    r.mapped(
        "experimental_attention_variant",
        "model.family, model.block_pattern",
        "Gated DeltaNet and attention sublayers, each followed by a feed-forward",
    )
    r.mapped(
        "linear_attention_freq",
        "model.block_pattern",
        f"{freq - 1} Gated DeltaNet layer(s) per attention layer",
    )
    for key, target in linear_attention.SIZE_KEYS.items():
        if r.has(key):
            r.mapped(key, f"model.{target}")
    for key, target in (
        ("attention_output_gate", "attn_output_gate"),
        ("apply_layernorm_1p", "norm_zero_centered"),
        ("rotary_percent", "partial_rotary_factor"),
    ):
        if r.has(key):
            r.mapped(key, f"model.{target}")
    r.note(
        f"family {model['family']}: Megatron names no architecture; its gated DeltaNet "
        "layers are Qwen3-Next's / Qwen3.5's, exported as Qwen3.5"
    )
