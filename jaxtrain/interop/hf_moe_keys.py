"""Mixture-of-experts keys of a Mixtral or Qwen3-MoE `config.json`, both ways (DeepSeek's,
gpt-oss' and Llama 4's live in their own modules).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.models.spec.hyperparameters import ModelSpec


def require(cfg: Mapping[str, Any], key: str, where: str) -> Any:
    """cfg[key], or ConfigError naming the file and the missing key."""
    if cfg.get(key) is None:
        raise ConfigError(f"{where}: required key {key!r} is missing.")
    return cfg[key]


def moe_fields(cfg: Mapping[str, Any], family: str, where: str) -> dict[str, Any]:
    """The expert keys of a Mixtral or Qwen3-MoE config ({} for dense families).

    transformers' balancing loss counts tokens where jaxtrain's counts assignments (k times
    smaller), so `router_aux_loss_coef` is scaled by k to keep the same training signal.
    """
    if family not in ("mixtral", "qwen3_moe"):
        return {}
    k = int(require(cfg, "num_experts_per_tok", where))
    fields: dict[str, Any] = dict(
        num_experts_per_tok=k, moe_aux_loss_coef=float(cfg.get("router_aux_loss_coef", 0.0)) * k
    )
    if family == "mixtral":
        return dict(
            fields,
            num_experts=int(require(cfg, "num_local_experts", where)),
            moe_intermediate_size=int(require(cfg, "intermediate_size", where)),
            moe_score="topk_softmax",
            moe_norm_topk=True,
        )
    experts = cfg.get("num_experts") or cfg.get("num_local_experts")
    if experts is None:
        raise ConfigError(f"{where}: required key 'num_experts' is missing.")
    return dict(
        fields,
        num_experts=int(experts),
        **qwen_moe_layers(cfg, where),
        moe_intermediate_size=int(require(cfg, "moe_intermediate_size", where)),
        moe_score="softmax_topk",
        moe_norm_topk=bool(cfg.get("norm_topk_prob", False)),
    )


def qwen_moe_layers(cfg: Mapping[str, Any], where: str) -> dict[str, int]:
    """num_dense_layers / moe_layer_step for Qwen3-MoE's expert layers: those not in
    `mlp_only_layers` whose index + 1 is a multiple of `decoder_sparse_step`."""
    layers = int(require(cfg, "num_hidden_layers", where))
    step = int(cfg.get("decoder_sparse_step", 1))
    only = list(cfg.get("mlp_only_layers") or [])
    if step < 1:
        raise ConfigError(f"{where}: decoder_sparse_step={step} must be a positive integer.")
    experts = [i for i in range(layers) if i not in only and (i + 1) % step == 0]
    if step > 1 and layers % step == 0 and experts == list(range(step - 1, layers, step)):
        return {"moe_layer_step": step}
    if experts and experts == list(range(experts[0], layers)):
        return {"num_dense_layers": experts[0]}
    raise ConfigError(
        f"{where}: decoder_sparse_step={step}, mlp_only_layers={only} put experts in layers "
        f"{experts} of {layers}, which is not supported; jaxtrain places expert layers after "
        "leading dense ones (decoder_sparse_step=1, mlp_only_layers=[0, ..., k-1]) or in the "
        "last layer of every group of decoder_sparse_step layers (num_hidden_layers a multiple "
        "of it, mlp_only_layers among the other layers)."
    )


def moe_config(spec: ModelSpec) -> dict[str, Any]:
    """The transformers expert keys of a mixture-of-experts spec ({} when dense)."""
    if not spec.num_experts:
        return {}
    k = spec.num_experts_per_tok
    cfg: dict[str, Any] = {
        "num_experts_per_tok": k,
        "router_aux_loss_coef": spec.moe_aux_loss_coef / k,
        "output_router_logits": False,
    }
    if spec.family == "mixtral":
        return dict(
            cfg,
            num_local_experts=spec.num_experts,
            router_jitter_noise=0.0,
            intermediate_size=spec.moe_intermediate_size,
        )
    # Top-k then softmax is softmax, top-k and renormalise.
    norm = spec.moe_norm_topk or spec.moe_score == "topk_softmax"
    return dict(
        cfg,
        num_experts=spec.num_experts,
        moe_intermediate_size=spec.moe_intermediate_size,
        norm_topk_prob=norm,
        decoder_sparse_step=spec.moe_layer_step,
        mlp_only_layers=list(range(spec.num_dense_layers)),
        use_sliding_window=False,
        sliding_window=None,
    )
