"""Rotary-embedding keys of a Hugging Face `config.json`, both ways: `rope_theta` and the
scaling (linear, llama3, yarn) in either layout (transformers 4's `rope_theta` + `rope_scaling`,
transformers 5's `rope_parameters`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.models.layers.rope import yarn_mscale
from jaxtrain.models.spec.hyperparameters import ModelSpec


def rope_fields(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """rope_theta and the scaling fields from either rope layout."""
    params = dict(cfg.get("rope_parameters") or {})
    legacy = cfg.get("rope_scaling") or {}
    if not params.get("rope_type") and not params.get("type"):
        # transformers 4 kept scaling in `rope_scaling`; merge so either layout reads the same.
        params = {**params, **legacy}
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    kind = params.get("rope_type") or params.get("type") or "default"
    fields: dict[str, Any] = {"rope_theta": float(theta)}
    if kind == "default":
        fields["rope_scaling"] = "none"
    elif kind in ("linear", "llama3") and params.get("factor") is None:
        raise ConfigError(f"{where}: rope type {kind!r} needs a `factor`.")
    elif kind == "yarn":
        fields.update(yarn_fields(cfg, params, where))
    elif kind == "linear":
        fields.update(rope_scaling="linear", rope_factor=float(params["factor"]))
    elif kind == "llama3":
        fields.update(
            rope_scaling="llama3",
            rope_factor=float(params["factor"]),
            rope_low_freq_factor=float(params.get("low_freq_factor", 1.0)),
            rope_high_freq_factor=float(params.get("high_freq_factor", 4.0)),
            rope_original_max_len=int(
                params.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
            ),
        )
    else:
        raise ConfigError(
            f"{where}: rope type {kind!r} is not supported; supported: default, "
            "linear, llama3, yarn."
        )
    prf = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if float(prf) != 1.0:
        raise ConfigError(f"{where}: partial_rotary_factor={prf} is not supported (only 1.0).")
    return fields


def yarn_fields(cfg: Mapping[str, Any], params: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The YaRN keys; a missing factor is the context ratio, as transformers infers it. An
    `attention_factor` is read when it is the default one (OLMo 3 spells it out)."""
    original = params.get("original_max_position_embeddings")
    if original is None:
        raise ConfigError(f"{where}: rope type 'yarn' needs `original_max_position_embeddings`.")
    factor = params.get("factor") or int(cfg["max_position_embeddings"]) / int(original)
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    given = params.get("attention_factor")
    if given is not None:
        default = (
            yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
            if mscale and mscale_all_dim
            else yarn_mscale(factor)
        )
        if not math.isclose(float(given), default, rel_tol=1e-6):
            raise ConfigError(
                f"{where}: yarn attention_factor={given!r} is not supported (only the "
                f"default, {default:.10g}, derived from factor and mscale)."
            )
    return dict(
        rope_scaling="yarn",
        rope_factor=float(factor),
        rope_original_max_len=int(original),
        rope_beta_fast=float(params.get("beta_fast") or 32.0),
        rope_beta_slow=float(params.get("beta_slow") or 1.0),
        rope_mscale=float(params.get("mscale") or 0.0),
        rope_mscale_all_dim=float(params.get("mscale_all_dim") or 0.0),
        rope_truncate=bool(params.get("truncate", True)),
    )


def rope_parameters(spec: ModelSpec) -> dict[str, Any]:
    """The transformers rope keys (rope_type and its factors) of the spec's scaling."""
    if spec.rope_scaling == "none":
        return {"rope_type": "default"}
    if spec.rope_scaling == "linear":
        return {"rope_type": "linear", "factor": spec.rope_factor}
    if spec.rope_scaling == "yarn":
        rope = {
            "rope_type": "yarn",
            "factor": spec.rope_factor,
            "original_max_position_embeddings": spec.rope_original_max_len,
            "beta_fast": spec.rope_beta_fast,
            "beta_slow": spec.rope_beta_slow,
        }
        # 0 means unset, which transformers spells by leaving the key out.
        for key, value in (
            ("mscale", spec.rope_mscale),
            ("mscale_all_dim", spec.rope_mscale_all_dim),
        ):
            if value:
                rope[key] = value
        if not spec.rope_truncate:
            rope["truncate"] = False
        return rope
    return {
        "rope_type": "llama3",
        "factor": spec.rope_factor,
        "low_freq_factor": spec.rope_low_freq_factor,
        "high_freq_factor": spec.rope_high_freq_factor,
        "original_max_position_embeddings": spec.rope_original_max_len,
    }
