"""MaxText's Qwen3-Next and Qwen3.5 blocks (`decoder_block: qwen3_next`, `qwen3_5`) -> jaxtrain's
`qwen3_next`, `qwen3_5` and `qwen3_5_moe` families (a hybrid stack, see
`jaxtrain.models.presets.qwen3_next`), as MaxText's qwen3 Next layers build them:

- every `inhomogeneous_layer_cycle_interval`-th layer gated full attention (qk-norm, a sigmoid
  output gate, RoPE on `partial_rotary_factor` of each head), the others Gated DeltaNet sized
  by the `gdn_*` keys; each followed by experts (`num_experts` > 1) or a SwiGLU MLP;
- zero-centred RMSNorms (1 + weight) and a sigmoid gate on the shared expert, whatever
  `use_qk_norm` says (the blocks have them built in);
- `use_mrope` and `mrope_section` turn every section by the same position for text, which is
  plain RoPE; the vision encoder keys matter only with `use_multimodal` (refused).

The experts' routing keys are `moe`'s.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport
from jaxtrain.models.presets.qwen3_next import layer_pattern

QWEN3_NEXT_BLOCKS = ("qwen3_next", "qwen3_5")
_GDN = (
    ("gdn_num_key_heads", "linear_num_key_heads"),
    ("gdn_num_value_heads", "linear_num_value_heads"),
    ("gdn_key_head_dim", "linear_key_head_dim"),
    ("gdn_value_head_dim", "linear_value_head_dim"),
    ("gdn_conv_kernel_dim", "linear_conv_kernel"),
    ("gdn_chunk_size", "linear_chunk"),
)


def family(block: str, experts: int) -> str:
    """The jaxtrain family of a qwen3_next / qwen3_5 block with `experts` experts."""
    if block == "qwen3_next":
        return "qwen3_next"
    return "qwen3_5_moe" if experts > 1 else "qwen3_5"


def map_qwen3_next(r: KeyReport, fields: dict[str, Any], block: str) -> None:
    """The hybrid layout, gated attention and Gated DeltaNet fields of a resolved MaxText
    config (after the shared dense keys; the experts are `moe.map_experts`')."""
    layers = int(fields["num_layers"])
    interval = int(r.get("inhomogeneous_layer_cycle_interval", 4) or 4)
    experts = int(r.get("num_experts", 1) or 1)
    fields.update(
        family=family(block, experts),
        num_layers=2 * layers,
        block_pattern=layer_pattern(layers, "E" if experts > 1 else "-", interval),
        qk_norm=True,
        attn_output_gate=True,
        norm_zero_centered=True,
        partial_rotary_factor=float(r.get("partial_rotary_factor", 1.0)),
        **{target: int(r.get(key)) for key, target in _GDN if r.get(key) is not None},
    )
    r.mapped(
        "decoder_block",
        "model.family, model.block_pattern, model.norm_zero_centered",
        "a Gated DeltaNet or gated attention sublayer then a feed-forward per layer",
    )
    r.mapped("base_num_decoder_layers", "model.num_layers", "two sublayers per layer")
    r.mapped(
        "inhomogeneous_layer_cycle_interval",
        "model.block_pattern",
        f"full attention every {interval}th layer",
    )
    r.mapped("partial_rotary_factor", "model.partial_rotary_factor")
    for key, target in _GDN:
        if r.has(key):
            r.mapped(key, f"model.{target}")
    for key in ("use_mrope", "mrope_section"):
        if r.has(key):
            r.ignored(key, "every section turns by the same position for text: plain RoPE")
    if r.has("attention_type"):
        r.ignored("attention_type", f"{block} blocks choose linear or full attention by position")
