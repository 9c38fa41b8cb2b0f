"""DeepSeek V2 / V3 `config.json` keys <-> the `ModelSpec` fields of latent attention, grouped
routing, shared experts and leading dense blocks.

transformers' `DeepseekV2ForCausalLM` routes by softmax ("greedy" or "group_limited_greedy"),
always rotates interleaved pairs and ignores `norm_topk_prob`; `DeepseekV3ForCausalLM` routes by
sigmoid with the `e_score_correction_bias` buffer and "noaux_tc" groups, and rotates interleaved
pairs unless `rope_interleave` is false. Both use `num_key_value_heads == num_attention_heads`
and derive `head_dim` from `qk_rope_head_dim`, which the spec mirrors.

`moe_bias_update_rate` is a training choice, not architecture: it reads as 0 (the bias stays as
loaded); pass `moe_bias_update_rate=0.001` as an override to keep balancing (DeepSeek V3's rate).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.models.spec.hyperparameters import ModelSpec

DEEPSEEK_FAMILIES = ("deepseek_v2", "deepseek_v3")
_V2_METHODS = ("greedy", "group_limited_greedy")


def _get(cfg: Mapping[str, Any], key: str, default: Any) -> Any:
    """cfg[key], or `default` when it is absent or null."""
    value = cfg.get(key)
    return default if value is None else value


def deepseek_fields(cfg: Mapping[str, Any], family: str, where: str) -> dict[str, Any]:
    """The spec fields of a DeepSeek V2 / V3 config (after the common ones are read)."""
    layer_freq = int(_get(cfg, "moe_layer_freq", 1))
    if layer_freq != 1:
        raise ConfigError(
            f"{where}: moe_layer_freq={layer_freq} is not supported; jaxtrain "
            "runs experts in every block after the first_k_dense_replace ones."
        )
    heads = int(cfg["num_attention_heads"])
    rope = int(_get(cfg, "qk_rope_head_dim", 64))
    v3 = family == "deepseek_v3"
    method = str(_get(cfg, "topk_method", "noaux_tc" if v3 else "greedy"))
    scoring = str(_get(cfg, "scoring_func", "sigmoid" if v3 else "softmax"))
    wanted = (("noaux_tc",), "sigmoid") if v3 else (_V2_METHODS, "softmax")
    if method not in wanted[0] or scoring != wanted[1]:
        raise ConfigError(
            f"{where}: topk_method={method!r}, scoring_func={scoring!r} is not "
            f"how {family} routes; expected topk_method in {list(wanted[0])} and "
            f"scoring_func={wanted[1]!r}."
        )
    grouped = method != "greedy"
    experts = cfg.get("n_routed_experts") or cfg.get("num_local_experts")
    if experts is None:
        raise ConfigError(f"{where}: required key 'n_routed_experts' is missing.")
    fields: dict[str, Any] = dict(
        num_kv_heads=heads,
        head_dim=rope,
        kv_lora_rank=int(_get(cfg, "kv_lora_rank", 512)),
        q_lora_rank=int(_get(cfg, "q_lora_rank", 0)),
        qk_nope_head_dim=int(_get(cfg, "qk_nope_head_dim", 128)),
        qk_rope_head_dim=rope,
        v_head_dim=int(_get(cfg, "v_head_dim", 128)),
        rope_interleave=bool(_get(cfg, "rope_interleave", True)) if v3 else True,
        num_experts=int(experts),
        num_experts_per_tok=int(_get(cfg, "num_experts_per_tok", 8 if v3 else 6)),
        moe_intermediate_size=int(cfg["moe_intermediate_size"]),
        moe_score="sigmoid" if v3 else "softmax_topk",
        moe_norm_topk=bool(_get(cfg, "norm_topk_prob", v3)),
        moe_topk_method=method,
        moe_n_group=int(_get(cfg, "n_group", 1)) if grouped else 1,
        moe_topk_group=int(_get(cfg, "topk_group", 1)) if grouped else 1,
        moe_routed_scaling=float(_get(cfg, "routed_scaling_factor", 1.0)),
        moe_shared_experts=int(_get(cfg, "n_shared_experts", 0)),
        num_dense_layers=int(_get(cfg, "first_k_dense_replace", 0)),
        moe_score_bias=v3,
        moe_bias_update_rate=0.0,
        # DeepSeek's f_i is E x the assignment fraction, so its loss is alpha x jaxtrain's.
        moe_aux_loss_coef=float(_get(cfg, "aux_loss_alpha", 0.0)),
    )
    return fields


def check_deepseek_expressible(spec: ModelSpec, arch: str) -> None:
    """ConfigError when a DeepSeek-family spec has something its transformers class lacks."""
    v3 = spec.family == "deepseek_v3"
    needs = {
        "kv_lora_rank": (spec.mla, "> 0 (multi-head latent attention)"),
        "num_experts": (spec.num_experts > 0, "> 0"),
        "moe_score": (
            spec.moe_score == ("sigmoid" if v3 else "softmax_topk"),
            "'sigmoid'" if v3 else "'softmax_topk'",
        ),
        "moe_topk_method": (
            spec.moe_topk_method in (("noaux_tc",) if v3 else _V2_METHODS),
            "'noaux_tc'" if v3 else "'greedy' or 'group_limited_greedy'",
        ),
        "moe_score_bias": (spec.moe_score_bias == v3, str(v3)),
        "num_kv_heads": (spec.num_kv_heads == spec.num_heads, f"model.num_heads={spec.num_heads}"),
        "head_dim": (
            spec.head_dim == spec.qk_rope_head_dim,
            f"model.qk_rope_head_dim={spec.qk_rope_head_dim}",
        ),
    }
    if not v3:
        # transformers' V2 router never renormalises, and its rotary pairs are interleaved.
        needs["moe_norm_topk"] = (not spec.moe_norm_topk, "False")
        needs["rope_interleave"] = (spec.rope_interleave, "True")
    for key, (ok, value) in needs.items():
        if not ok:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} cannot be written as {arch}; "
                f"it needs model.{key} = {value}."
            )


def deepseek_config(spec: ModelSpec) -> dict[str, Any]:
    """The transformers keys of a DeepSeek V2 / V3 spec (the common ones are written apart)."""
    v3 = spec.family == "deepseek_v3"
    cfg: dict[str, Any] = dict(
        num_key_value_heads=spec.num_heads,
        kv_lora_rank=spec.kv_lora_rank,
        q_lora_rank=spec.q_lora_rank or None,
        qk_nope_head_dim=spec.qk_nope_head_dim,
        qk_rope_head_dim=spec.qk_rope_head_dim,
        v_head_dim=spec.v_head_dim,
        n_routed_experts=spec.num_experts,
        num_experts_per_tok=spec.num_experts_per_tok,
        moe_intermediate_size=spec.moe_intermediate_size,
        n_shared_experts=spec.moe_shared_experts,
        first_k_dense_replace=spec.num_dense_layers,
        moe_layer_freq=1,
        routed_scaling_factor=spec.moe_routed_scaling,
        n_group=spec.moe_n_group,
        topk_group=spec.moe_topk_group,
        topk_method=spec.moe_topk_method,
        scoring_func="sigmoid" if v3 else "softmax",
        norm_topk_prob=spec.moe_norm_topk,
        aux_loss_alpha=spec.moe_aux_loss_coef,
        attention_bias=False,
    )
    if v3:
        cfg["rope_interleave"] = spec.rope_interleave
        cfg["num_nextn_predict_layers"] = 0  # no multi-token-prediction module is written
    return cfg
