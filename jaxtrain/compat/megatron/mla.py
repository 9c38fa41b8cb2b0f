"""Megatron-LM multi-latent attention arguments -> jaxtrain's MLA keys (`model.kv_lora_rank`,
...).

Megatron's MLA matches DeepSeek's: q (optionally through a `q_lora_rank` latent) and a shared
`kv_lora_rank` latent, each latent RMS-normalised when `qk_layernorm` is on, rotary embeddings
on `qk_pos_emb_head_dim` dims applied to de-interleaved pairs (jaxtrain's `rope_interleave`,
which gives the same attention scores), and YaRN scaling unless `rope_type` is "rope".
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport, is_off
from jaxtrain.errors import ConfigError

MLA_KEYS = (
    "q_lora_rank",
    "kv_lora_rank",
    "qk_head_dim",
    "qk_pos_emb_head_dim",
    "v_head_dim",
    "mscale",
    "mscale_all_dim",
    "rotary_scaling_factor",
    "original_max_position_embeddings",
    "beta_fast",
    "beta_slow",
)
# Megatron's MLA defaults where the source leaves a key out.
_DEFAULTS = {
    "qk_head_dim": 128,
    "qk_pos_emb_head_dim": 64,
    "v_head_dim": 128,
    "rotary_scaling_factor": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 0.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
}


def _value(r: KeyReport, key: str) -> Any:
    value = r.get(key)
    return _DEFAULTS[key] if value is None else value


def map_mla(r: KeyReport, model: dict[str, Any]) -> None:
    """Replaces grouped-query attention in `model` by multi-latent attention."""
    kv_rank = r.get("kv_lora_rank")
    if is_off(kv_rank):
        raise ConfigError(f"{r.source}: multi_latent_attention needs kv_lora_rank > 0.")
    q_rank = 0 if is_off(r.get("q_lora_rank")) else int(r.get("q_lora_rank"))
    rope_dim = int(_value(r, "qk_pos_emb_head_dim"))
    # num_kv_heads / head_dim are unused by MLA; the presets mirror transformers' config.
    model.update(
        kv_lora_rank=int(kv_rank),
        q_lora_rank=q_rank,
        qk_nope_head_dim=int(_value(r, "qk_head_dim")),
        qk_rope_head_dim=rope_dim,
        v_head_dim=int(_value(r, "v_head_dim")),
        num_kv_heads=model["num_heads"],
        head_dim=rope_dim,
        rope_interleave=True,
        qk_norm=False,
    )
    r.mapped(
        "multi_latent_attention",
        "model.kv_lora_rank",
        "rotary pairs de-interleaved as DeepSeek does (model.rope_interleave)",
    )
    for key, target in (
        ("kv_lora_rank", "kv_lora_rank"),
        ("q_lora_rank", "q_lora_rank"),
        ("qk_head_dim", "qk_nope_head_dim"),
        ("qk_pos_emb_head_dim", "qk_rope_head_dim"),
        ("v_head_dim", "v_head_dim"),
    ):
        if r.has(key):
            r.mapped(
                key,
                f"model.{target}",
                "unset: no query latent" if key == "q_lora_rank" and not q_rank else "",
            )
    if r.get("qk_layernorm"):
        r.mapped(
            "qk_layernorm",
            "model.kv_lora_rank",
            "with MLA it norms the q and kv latents, which jaxtrain's MLA always does",
        )
    else:
        r.unsupported(
            "qk_layernorm",
            "MLA without latent RMSNorms is not implemented; "
            "jaxtrain always normalises the q and kv latents",
        )
    for key in ("kv_channels", "group_query_attention", "num_query_groups"):
        if r.has(key):
            r.ignored(key, "multi-latent attention has no separate kv heads or head width")
    if r.get("add_qkv_bias"):
        r.unsupported(
            "add_qkv_bias", "q/k/v biases are not implemented with multi-latent attention"
        )
    _yarn(r, model)


def _yarn(r: KeyReport, model: dict[str, Any]) -> None:
    kind = r.get("rope_type")
    factor = float(_value(r, "rotary_scaling_factor"))
    yarn_keys = (
        "rotary_scaling_factor",
        "mscale",
        "mscale_all_dim",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
    )
    if kind not in (None, "yarn", "rope"):
        return  # reported with the other rope_type values
    if kind == "rope" or factor == 1.0:
        why = (
            "rope_type rope: plain rotary embeddings"
            if kind == "rope"
            else "rotary_scaling_factor 1: YaRN leaves the frequencies and scale unchanged"
        )
        for key in (*yarn_keys, "rope_type"):
            if r.has(key) and not r.handled(key):
                r.ignored(key, why)
        return
    model.update(
        rope_scaling="yarn",
        rope_factor=factor,
        rope_truncate=True,
        rope_original_max_len=int(_value(r, "original_max_position_embeddings")),
        rope_beta_fast=float(_value(r, "beta_fast")),
        rope_beta_slow=float(_value(r, "beta_slow")),
        rope_mscale=float(_value(r, "mscale")),
        rope_mscale_all_dim=float(_value(r, "mscale_all_dim")),
    )
    targets = {
        "rotary_scaling_factor": "rope_factor",
        "mscale": "rope_mscale",
        "mscale_all_dim": "rope_mscale_all_dim",
        "beta_fast": "rope_beta_fast",
        "beta_slow": "rope_beta_slow",
        "original_max_position_embeddings": "rope_original_max_len",
    }
    for key, target in targets.items():
        if r.has(key):
            r.mapped(key, f"model.{target}", "YaRN of multi-latent attention")
    if r.has("rope_type"):
        r.mapped(
            "rope_type",
            "model.rope_scaling",
            "unset: Megatron's MLA default, yarn" if kind is None else "",
        )
