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

Keys a file leaves out take Megatron's TransformerConfig defaults, which Primus' layers read
then (`zebra_llama_1B_kda-pretrain.yaml` pairs the KDA spec with a Mamba preset that sets none).

Primus' `HybridStack` places its blocks itself (`primus_allocate_layers`): every mixer (M, or
* for attention) is followed by an MLP, attention blocks head evenly spaced groups.
`jaxtrain.compat.megatron.mamba` writes the mixer as `G` (GDN) or `K` (KDA) in the pattern.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport, is_off
from jaxtrain.errors import ConfigError

SIZE_KEYS = {
    "linear_num_key_heads": "linear_num_key_heads",
    "linear_num_value_heads": "linear_num_value_heads",
    "linear_key_head_dim": "linear_key_head_dim",
    "linear_value_head_dim": "linear_value_head_dim",
    "linear_conv_kernel_dim": "linear_conv_kernel",
}
LINEAR_KEYS = (*SIZE_KEYS, "use_short_conv")
# Megatron's TransformerConfig defaults for these keys (its Qwen3-Next-sized gated delta net),
# what Primus' GDN / KDA layers read when a file leaves them out.
MEGATRON_DEFAULTS = {
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
}
# Primus' FLA runtime knobs (mamba_base.yaml: which Triton kernel or fused loss computes the
# same numbers, and cache flushing): speed and memory only.
FLA_RUNTIME_KEYS = (
    "use_fla_fused_swiglu",
    "use_fla_fused_rmsnorm",
    "use_fla_fused_gated_norm",
    "use_fla_short_conv",
    "use_fla_data",
    "use_fla_triton_kda",
    "use_fla_kda_in_kernel_gate",
    "use_fla_fused_norm_gated",
    "fla_cache_dir",
    "fla_mla_attn",
    "fused_ce_mode",
    "fused_ce_chunks",
    "empty_cache_interval",
)
# The layer-spec module of Primus' Zebra-Llama hybrids (Mamba-2 / GDN / KDA blocks with MLA).
PRIMUS_HYBRID_SPECS = "hybrid_mamba_mla_layer_specs"


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
    model = {
        target: int(MEGATRON_DEFAULTS[key] if key in missing else r.get(key))
        for key, target in SIZE_KEYS.items()
    }
    if missing:
        r.note(
            f"spec {r.get('spec')!r} builds {kind.upper()} blocks but {', '.join(missing)} "
            "are not set: Megatron's TransformerConfig defaults size them ("
            + ", ".join(f"{key}={MEGATRON_DEFAULTS[key]}" for key in missing)
            + ")"
        )
    if model["linear_num_value_heads"] % model["linear_num_key_heads"]:
        raise ConfigError(
            f"{r.source}: linear_num_value_heads={model['linear_num_value_heads']} is not a "
            f"multiple of linear_num_key_heads={model['linear_num_key_heads']}; each query/key "
            "head must serve a whole number of value heads."
        )
    for key, target in SIZE_KEYS.items():
        if r.has(key):
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


def primus_hybrid(r: KeyReport) -> bool:
    """Whether the experiment's layer spec is one of Primus' Zebra-Llama hybrid stacks."""
    spec = r.get("spec")
    module = str(spec[0] if isinstance(spec, (list, tuple)) and spec else spec or "")
    return module.endswith(PRIMUS_HYBRID_SPECS)


def primus_allocate_layers(total: int, attention_ratio: float) -> str:
    """Primus `HybridStack.allocate_layers`: `total` sublayers as total / 2 (mixer, MLP) pairs,
    int(pairs x ratio) of them attention, each attention pair followed by as many Mamba pairs
    as divide evenly, the remainder at the end."""
    pairs = total // 2
    attention = int(pairs * attention_ratio)
    mamba = pairs - attention
    if attention == 0:
        return "M-" * mamba
    if mamba == 0:
        return "*-" * attention
    if attention_ratio <= 0.5:
        return ("*-" + "M-" * (mamba // attention)) * attention + "M-" * (mamba % attention)
    return "*-" * (attention - mamba) + "*-M-" * mamba


def map_primus_hybrid(r: KeyReport, model: dict[str, Any]) -> None:
    """What Primus' hybrid experiments set beside the block layout: the FLA runtime knobs
    (ignored: kernels), `layernorm_epsilon` (the TransformerConfig field itself, which Primus
    sets over norm_epsilon), and `qk_layernorm` (its MLA layers normalize the latents always:
    the norm is fused into the up projections, or a separate RMSNorm without Transformer
    Engine)."""
    for key in FLA_RUNTIME_KEYS:
        if r.has(key):
            r.ignored(key, "Primus' FLA kernel / fused-loss choice (speed and memory only)")
    if not is_off(r.get("layernorm_epsilon")):
        model["norm_eps"] = float(r.get("layernorm_epsilon"))
        r.mapped("layernorm_epsilon", "model.norm_eps")
    if model.get("kv_lora_rank"):  # unset means off, which map_mla reports as unbuildable
        r.mapped(
            "qk_layernorm",
            "model.kv_lora_rank",
            "Primus' hybrid MLA layers normalize the q / kv latents whatever it says",
        )
