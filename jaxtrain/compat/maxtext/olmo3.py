"""MaxText's OLMo 3 block (`decoder_block: olmo3`) -> jaxtrain's `olmo3` family, as MaxText builds
it (models/olmo3.py and layers/attentions.py at the commit in tests/fixtures/compat/SOURCES.md):

- RMSNorms on the attention and MLP outputs only, before each residual add;
- qk-norm (`use_qk_norm`) over all heads of q and of k at once (MaxText's GlobalRMSNorm, which
  it chooses for model names starting with olmo3: every olmo3 model file);
- three sliding-window blocks (`sliding_window_size`) then a global one, repeating: MaxText's
  fixed OLMO3_ATTENTION_PATTERN, whatever `inhomogeneous_layer_cycle_interval` (how it scans)
  says;
- one rotary table for every block: MaxText applies YaRN (`rope_type: yarn`) to the sliding
  blocks too, where transformers' Olmo3ForCausalLM rotates them unscaled.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport

# Blocks per global one: MaxText's OLMO3_ATTENTION_PATTERN is (local, local, local, global).
_GLOBAL_STEP = 4


def map_olmo3(r: KeyReport, fields: dict[str, Any]) -> None:
    """The OLMo 3 fields of a resolved MaxText config (after the shared dense keys)."""
    fields.update(
        pre_norms=False,
        post_norms=True,
        qk_norm_across_heads=bool(fields["qk_norm"]),
        qkv_bias=bool(r.get("attention_bias")),
        o_bias=bool(r.get("attention_bias")),
    )
    r.mapped("decoder_block", "model.family, model.pre_norms, model.post_norms")
    r.mapped(
        "use_qk_norm",
        "model.qk_norm, model.qk_norm_across_heads",
        "over all heads at once (MaxText's GlobalRMSNorm)",
    )
    r.mapped("attention_bias", "model.qkv_bias, model.o_bias")
    window = int(r.get("sliding_window_size") or 0)
    if window > 0:
        fields.update(sliding_window=window, global_layer_step=_GLOBAL_STEP)
    r.mapped(
        "sliding_window_size",
        "model.sliding_window, model.global_layer_step",
        "three sliding blocks then a global one" if window > 0 else "0: every block global",
    )
    for key, why in (
        ("inhomogeneous_layer_cycle_interval", "how MaxText scans the fixed 4-block pattern"),
        ("attention_type", "olmo3 blocks choose sliding or global by position"),
    ):
        if r.has(key):
            r.ignored(key, why)
    if fields.get("rope_scaling") != "none" and window > 0:
        r.note(
            "MaxText's olmo3 block rotates its sliding blocks by the scaled (YaRN) table too, "
            "as jaxtrain does here; transformers' Olmo3ForCausalLM rotates them unscaled"
        )
