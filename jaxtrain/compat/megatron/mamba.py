"""Megatron `model_type: mamba` files (Primus' mamba_370M, Zebra-Llama hybrids): the Mamba-2
sizes and the hybrid layer pattern, as Megatron's `MambaModel` builds them.

The pattern is `hybrid_override_pattern` when given, else Megatron's allocation from
`hybrid_attention_ratio` / `hybrid_mlp_ratio` (`allocate_layers`: attention sublayers spread
evenly between Mamba runs that start and end the stack, then MLPs right-justified among the
Mamba ones); a pure Mamba model (`is_hybrid_model: false`) is `M` repeated.

Primus' Zebra-Llama experiments name their own layer specs (`spec: [...hybrid_mamba_mla_layer_specs,
name]`): Primus' `HybridStack` then pairs every mixer with an MLP (`primus_allocate_layers`), and
the spec's name says whether its mixer blocks are Mamba-2 (with Primus' expand 1), Gated
DeltaNet (`G`) or Kimi delta attention (`K`), sized by the `linear_*` keys
(`jaxtrain.compat.megatron.linear_attention`). Such files resolve to family `zebra_llama`.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.architectures import unbuildable
from jaxtrain.compat.common.report import KeyReport, is_off
from jaxtrain.compat.megatron import linear_attention as megatron_linear
from jaxtrain.errors import ConfigError

# Keys of the linear-attention mixers Zebra-Llama's GDN / KDA variants add.
_LINEAR_KEYS = (
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_conv_kernel_dim",
)


def allocate_layers(total: int, attention_ratio: float, mlp_ratio: float) -> str:
    """Megatron's automatic hybrid pattern for `total` sublayers."""
    attention = round(total * attention_ratio)
    mamba = total - attention
    section = mamba / (attention + 1)
    kinds = ["M"] * total
    x = section
    for i in range(total):
        if x < 0.5:
            kinds[i] = "*"
            x += section
        else:
            x -= 1
    mlp = round(total * mlp_ratio)
    if mlp > 0:
        ratio = (mamba - mlp) / mlp
        x = ratio
        for i in range(total):
            if kinds[i] == "M":
                if x < 0.5:
                    kinds[i] = "-"
                    x += ratio
                else:
                    x -= 1
    return "".join(kinds)


def map_mamba(r: KeyReport, model: dict[str, Any]) -> None:
    """Turns the transformer settings `_model` mapped into a Mamba / hybrid model."""
    kind = megatron_linear.mixer_kind(r)
    primus = megatron_linear.primus_hybrid(r)
    if kind != "mamba" and not primus:
        raise unbuildable(
            r.source,
            "spec",
            r.get("spec"),
            f"{kind.upper()} blocks from a layer spec outside Primus' "
            f"{megatron_linear.PRIMUS_HYBRID_SPECS} (whose block layout jaxtrain knows)",
        )
    if any(r.has(key) for key in _LINEAR_KEYS) and kind == "mamba":
        for key in _LINEAR_KEYS:
            if r.has(key):
                r.ignored(key, "the layer spec builds Mamba-2 blocks, not GDN / KDA")
    layers = model["num_layers"]
    hybrid = not is_off(r.get("is_hybrid_model"))
    override = r.get("hybrid_override_pattern")
    attn_ratio = float(r.get("hybrid_attention_ratio") or 0.0)
    mlp_ratio = float(r.get("hybrid_mlp_ratio") or 0.0)
    if override:
        pattern = str(override)
        if len(pattern) != layers:
            raise ConfigError(
                f"{r.source}: hybrid_override_pattern={pattern!r} has "
                f"{len(pattern)} sublayers but num_layers={layers}; Megatron "
                "needs them equal."
            )
        r.mapped("hybrid_override_pattern", "model.block_pattern")
        if (
            primus
            and hybrid
            and pattern != megatron_linear.primus_allocate_layers(layers, attn_ratio)
        ):
            r.note(
                f"hybrid_override_pattern={pattern!r} differs from the layout Primus' HybridStack "
                "allocates from hybrid_attention_ratio "
                f"({megatron_linear.primus_allocate_layers(layers, attn_ratio)!r}); jaxtrain "
                "builds the pattern as written"
            )
    elif hybrid and primus:
        pattern = megatron_linear.primus_allocate_layers(layers, attn_ratio)
    elif hybrid:
        pattern = allocate_layers(layers, attn_ratio, mlp_ratio)
    else:
        pattern = "M" * layers
    for key in ("is_hybrid_model", "hybrid_attention_ratio", "hybrid_mlp_ratio"):
        if r.has(key):
            who = "Primus'" if primus else "Megatron's"
            r.mapped(key, "model.block_pattern", f"{who} allocation: {pattern}")
    if kind != "mamba":
        pattern = pattern.replace("M", "G" if kind == "gdn" else "K")
        model.update(megatron_linear.mixer_settings(r))
    if primus:
        r.mapped("spec", "model.block_pattern", f"Primus' hybrid stack, {kind} mixer blocks")
        megatron_linear.map_primus_hybrid(r, model)
    heads = r.get("mamba_num_heads")
    model.update(
        block_pattern=pattern,
        mamba_version=2,
        ssm_state_size=int(r.get("mamba_state_dim") or 128),
        ssm_head_dim=int(r.get("mamba_head_dim") or 64),
        ssm_n_groups=int(r.get("mamba_num_groups") or 8),
        ssm_num_heads=int(heads) if heads else 0,
        # Primus' hybrid_stack_spec builds its Mamba mixers with expand 1.
        ssm_expand=int(r.get("mamba_expand") or (1 if primus else 2)),
        ssm_conv_kernel=4,
        ssm_chunk_size=128,
        # Megatron's latent attention rotates its rope dims whatever position_embedding_type says.
        use_rope=(
            r.get("position_embedding_type", "none") == "rope" or bool(model.get("kv_lora_rank"))
        )
        and "*" in pattern,
    )
    for key, target in (
        ("mamba_state_dim", "ssm_state_size"),
        ("mamba_head_dim", "ssm_head_dim"),
        ("mamba_num_groups", "ssm_n_groups"),
        ("mamba_num_heads", "ssm_num_heads"),
        ("mamba_expand", "ssm_expand"),
    ):
        if r.has(key):
            r.mapped(key, f"model.{target}")
    # MLP sublayers and experts take Megatron's one activation: gated SwiGLU, or ungated
    # squared ReLU (Nemotron-H, Nemotron 3).
    targets = [
        f"model.{t}"
        for ch, t in (("-", "mlp_activation"), ("E", "moe_activation"))
        if ch in pattern
    ]
    if targets:
        if r.get("swiglu"):
            activation = "swiglu"
        elif r.get("squared_relu"):
            activation = "relu2"
        else:
            raise unbuildable(
                r.source,
                "swiglu",
                r.get("swiglu"),
                "a hybrid whose MLP sublayers or experts use GELU (set swiglu or squared_relu)",
            )
        for target in targets:
            model[target.removeprefix("model.")] = activation
        for key in ("swiglu", "squared_relu"):
            if r.has(key):
                r.mapped(key, ", ".join(targets), f"{activation} MLPs")
    if r.has("position_embedding_type"):
        r.mapped("position_embedding_type", "model.use_rope")
    if "*" not in pattern:
        r.note("no attention sublayers: the attention settings size nothing")
    if primus:
        model["family"] = "zebra_llama"
    elif "E" in pattern:
        model["family"] = "hybrid"
    elif "*" in pattern or "-" in pattern:
        model["family"] = "hybrid" if model.get("kv_lora_rank") else "nemotron_h"
    else:
        model["family"] = "mamba2"
