"""MaxText's GPT-3 block (`decoder_block: gpt3`) -> jaxtrain's `gpt3` family, as MaxText builds it
(models/gpt3.py, layers/decoders.py and linears.py at the commit in
tests/fixtures/compat/SOURCES.md):

- a LayerNorm with a bias before attention and another before the MLP (the MlpBlock's own
  pre-norm), one more at the end; MaxText stores each scale as 1 + weight (init 0), jaxtrain
  the scale itself: the same norm, the weight shifted;
- multi-head attention (`base_num_kv_heads` must equal the query heads), biased q/k/v
  (`fused_qkv` packs them into one projection: the same weights) and output projections,
  queries scaled by head_dim^-0.5;
- an ungated MLP with biases and `mlp_activations: [gelu]`, flax's tanh-approximated GELU;
- learned absolute positions, `trainable_position_size` of them, added to the token
  embeddings; with none (the -1 of base.yml) MaxText's gpt3 block has no positions at all,
  which jaxtrain does not build.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport


def map_gpt3(r: KeyReport, fields: dict[str, Any]) -> None:
    """The GPT-3 fields of a resolved MaxText config (after the shared dense keys)."""
    fields.update(
        norm_type="layer",
        mlp_activation="gelu",
        mlp_bias=True,
        qkv_bias=True,
        o_bias=True,
        qk_norm=False,
        learned_positions=max(int(r.get("trainable_position_size", -1) or -1), 0),
    )
    r.mapped(
        "decoder_block",
        "model.family, model.norm_type, model.mlp_bias, model.qkv_bias, model.o_bias",
        "GPT-3: LayerNorms with biases, biased projections",
    )
    if fields["learned_positions"]:
        r.mapped("trainable_position_size", "model.learned_positions")
    else:
        r.unsupported(
            "trainable_position_size",
            "-1: MaxText's gpt3 block then has no position information at all; jaxtrain's "
            "learns positions (set it >= max_target_length)",
        )
    if fields["num_kv_heads"] != fields["num_heads"]:
        r.unsupported(
            "base_num_kv_heads",
            f"{fields['num_kv_heads']}: MaxText's gpt3 block asserts as many kv heads as "
            f"query heads ({fields['num_heads']})",
        )
    if r.has("fused_qkv"):
        r.ignored("fused_qkv", "one q/k/v projection or three: the same weights")
    for key in ("attention_bias", "use_qk_norm"):
        if r.has(key) and not r.handled(key):
            r.ignored(key, "the gpt3 block biases its projections and has no qk-norm")
    # Whatever the rotary keys say (base.yml sets some), the block rotates nothing.
    fields.update(rope_scaling="none", rope_factor=1.0, rope_interleave=False)
    for key in ("rope_type", "rope_max_timescale", "rope_use_scale", "rope_interleave"):
        if r.has(key):
            r.ignored(key, "the gpt3 block has no rotary embeddings")
