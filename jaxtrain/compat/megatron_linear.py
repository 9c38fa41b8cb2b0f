"""Primus (Megatron) settings of Zebra-Llama's delta-rule mixers -> jaxtrain's `model.linear_*`.

Primus' Zebra-Llama experiments are `model_type: mamba` hybrids whose mixer kind is chosen by
the layer spec they name (`spec: [module, name]`): `gdn_hybrid_stack_spec[_no_te]` builds Gated
DeltaNet blocks, `kda_hybrid_stack_spec[_no_te]` Kimi delta attention blocks, and
`[mamba_]hybrid_stack_spec[_no_te]` Mamba-2 blocks. Their layers follow FLA's (the YAMLs say
"matches FLA config exactly"), so the sizes map one to one:

    linear_num_key_heads    -> model.linear_num_key_heads    (FLA num_heads)
    linear_num_value_heads  -> model.linear_num_value_heads  (FLA num_v_heads)
    linear_key_head_dim     -> model.linear_key_head_dim     (FLA head_dim)
    linear_value_head_dim   -> model.linear_value_head_dim   (FLA head_dim x expand_v)
    linear_conv_kernel_dim  -> model.linear_conv_kernel      (FLA conv_size)
    use_short_conv          -> model.linear_short_conv       (FLA default: on)

and FLA's layer defaults give the rest: Gated DeltaNet with its silu output gate, KDA with a
bias on its output gate's second projection.

`mixer_settings` reads them; the hybrid stack that would use them reads the block pattern.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.report import KeyReport, is_off
from jaxtrain.errors import ConfigError

SIZE_KEYS = {
    "linear_num_key_heads": "linear_num_key_heads",
    "linear_num_value_heads": "linear_num_value_heads",
    "linear_key_head_dim": "linear_key_head_dim",
    "linear_value_head_dim": "linear_value_head_dim",
    "linear_conv_kernel_dim": "linear_conv_kernel",
}
LINEAR_KEYS = (*SIZE_KEYS, "use_short_conv")


def mixer_kind(r: KeyReport) -> str:
    """The mixer of a Primus hybrid's non-attention blocks: "gdn", "kda" or "mamba", from the
    layer spec the experiment names (Mamba-2 when it names none)."""
    spec = r.get("spec")
    name = str(spec[-1] if isinstance(spec, (list, tuple)) and spec else spec or "")
    for kind in ("gdn", "kda"):
        if name.startswith(f"{kind}_"):
            return kind
    return "mamba"


def mixer_settings(r: KeyReport) -> dict[str, Any]:
    """`model.*` settings ({key without the model. prefix: value}) of the delta-rule mixer the
    experiment's layer spec names; empty for a Mamba hybrid. Reports the keys it reads."""
    kind = mixer_kind(r)
    if kind == "mamba":
        return {}
    missing = [key for key in SIZE_KEYS if is_off(r.get(key))]
    if missing:
        raise ConfigError(
            f"{r.source}: spec {r.get('spec')!r} builds {kind.upper()} blocks but "
            f"{', '.join(missing)} are not set; Primus then sizes them inside its layer spec, "
            "which jaxtrain does not read. Set the linear_* sizes in the model YAML (as "
            "zebra_llama_1B_kda_pure.yaml does)."
        )
    model = {target: int(r.get(key)) for key, target in SIZE_KEYS.items()}
    if model["linear_num_value_heads"] % model["linear_num_key_heads"]:
        raise ConfigError(
            f"{r.source}: linear_num_value_heads={model['linear_num_value_heads']} is not a "
            f"multiple of linear_num_key_heads={model['linear_num_key_heads']}; each query/key "
            "head must serve a whole number of value heads."
        )
    for key, target in SIZE_KEYS.items():
        r.mapped(key, f"model.{target}", f"{kind.upper()} blocks")
    short_conv = r.get("use_short_conv")
    model["linear_short_conv"] = True if short_conv is None else bool(short_conv)
    if r.has("use_short_conv"):
        r.mapped("use_short_conv", "model.linear_short_conv")
    if kind == "gdn":
        model["linear_output_gate"] = True  # FLA GatedDeltaNet's use_gate default
    else:
        model["linear_gate_bias"] = True  # FLA KimiDeltaAttention's g_proj bias
    return model
