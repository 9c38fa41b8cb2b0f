"""Hugging Face `config.json` <-> `ModelSpec`, for Llama 2/3, Qwen 2.5/3, Mistral, Mixtral,
Qwen3-MoE, DeepSeek V2/V3, gpt-oss and Llama 4 text (the keys of the last three live in
`hf_deepseek`, `hf_gpt_oss` and `hf_llama4`).

Reading accepts both the transformers-4 layout (`rope_theta` at top level, `rope_scaling`) and
the transformers-5 one (`rope_parameters` holding `rope_theta`); writing uses the layout of the
installed transformers (the 5 layout when none is installed). Fields that are run choices
rather than architecture (`param_dtype`, `dtype`, `remat`, `scan_layers`) are not read from the
file: pass them as overrides.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import pathlib
from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_deepseek import (
    DEEPSEEK_FAMILIES,
    check_deepseek_expressible,
    deepseek_config,
    deepseek_fields,
)
from jaxtrain.interop.hf_gpt_oss import check_gpt_oss_expressible, gpt_oss_config, gpt_oss_fields
from jaxtrain.interop.hf_llama4 import check_llama4_expressible, llama4_config, llama4_fields
from jaxtrain.interop.hf_ssm import SSM_ARCHITECTURES, SSM_FAMILIES, ssm_config, ssm_fields
from jaxtrain.models.spec.hyperparameters import ModelSpec

# Families whose keys live in their own module: (read fields, check a spec, write keys).
_FAMILY_KEYS = {
    "gpt_oss": (gpt_oss_fields, check_gpt_oss_expressible, gpt_oss_config),
    "llama4": (llama4_fields, check_llama4_expressible, llama4_config),
}

# Architecture name (config.json `architectures[0]`) -> (spec family, transformers model_type).
ARCHITECTURES: dict[str, tuple[str, str]] = {
    "LlamaForCausalLM": ("llama", "llama"),
    "Qwen2ForCausalLM": ("qwen2", "qwen2"),
    "Qwen3ForCausalLM": ("qwen3", "qwen3"),
    "MistralForCausalLM": ("mistral", "mistral"),
    "MixtralForCausalLM": ("mixtral", "mixtral"),
    "Qwen3MoeForCausalLM": ("qwen3_moe", "qwen3_moe"),
    "DeepseekV2ForCausalLM": ("deepseek_v2", "deepseek_v2"),
    "DeepseekV3ForCausalLM": ("deepseek_v3", "deepseek_v3"),
    "GptOssForCausalLM": ("gpt_oss", "gpt_oss"),
    "Llama4ForCausalLM": ("llama4", "llama4_text"),
    **SSM_ARCHITECTURES,
}
FAMILY_ARCHITECTURE = {family: arch for arch, (family, _) in ARCHITECTURES.items()}
_MODEL_TYPE_ARCHITECTURE = {mt: arch for arch, (_, mt) in ARCHITECTURES.items()}
_QWEN = ("qwen2", "qwen3")
# Families whose `attention_bias` puts biases on q, k, v and o (gpt-oss and Llama 4 read it in
# their own modules).
_ATTENTION_BIAS = ("llama", "qwen3", "qwen3_moe")


def _transformers_major() -> int:
    """Major version of the installed transformers (5 when it is absent: the newest layout)."""
    try:
        return int(importlib.metadata.version("transformers").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return 5


def read_hf_config(cfg: Mapping[str, Any] | str | pathlib.Path) -> tuple[dict[str, Any], str]:
    """The config as a dict plus a label for messages (its file path, or `<dict>`).

    A folder is read as `folder/config.json`.
    """
    if isinstance(cfg, Mapping):
        return dict(cfg), "<config dict>"
    path = pathlib.Path(cfg)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"Hugging Face config {path} does not exist.")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # UnicodeDecodeError too
        raise ConfigError(
            f"{path} is not valid JSON ({e}); it is truncated or damaged: download or copy "
            "it again."
        ) from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path} does not hold a Hugging Face config (a JSON object).")
    return cfg, str(path)


def hf_architecture(cfg: Mapping[str, Any], where: str = "<config dict>") -> str:
    """The supported architecture name a config declares, or ConfigError naming what it found."""
    archs = cfg.get("architectures") or []
    arch = archs[0] if archs else _MODEL_TYPE_ARCHITECTURE.get(cfg.get("model_type", ""), "")
    if arch not in ARCHITECTURES:
        found = arch or f"model_type={cfg.get('model_type')!r} without `architectures`"
        raise ConfigError(
            f"{where}: architecture {found} is not supported; supported "
            f"architectures: {', '.join(sorted(ARCHITECTURES))}."
        )
    return arch


def _require(cfg: Mapping[str, Any], key: str, where: str) -> Any:
    if cfg.get(key) is None:
        raise ConfigError(f"{where}: required key {key!r} is missing.")
    return cfg[key]


def _rope_fields(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
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
        fields.update(_yarn_fields(cfg, params, where))
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


def _yarn_fields(cfg: Mapping[str, Any], params: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The YaRN keys; a missing factor is the context ratio, as transformers infers it."""
    if params.get("attention_factor") is not None:
        raise ConfigError(
            f"{where}: yarn attention_factor={params['attention_factor']!r} is "
            "not supported (only the default, derived from factor and mscale)."
        )
    original = params.get("original_max_position_embeddings")
    if original is None:
        raise ConfigError(f"{where}: rope type 'yarn' needs `original_max_position_embeddings`.")
    factor = params.get("factor") or int(cfg["max_position_embeddings"]) / int(original)
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


def _qwen_window(cfg: Mapping[str, Any], num_layers: int, where: str) -> dict[str, int]:
    """Qwen's window: set only with use_sliding_window, on the layers `layer_types` marks (by
    default those at index >= max_window_layers, as transformers derives them); the full
    attention layers before the first sliding one are the spec's leading global layers."""
    window = cfg.get("sliding_window")
    if not cfg.get("use_sliding_window") or not window:
        return {"sliding_window": 0}
    types = list(
        cfg.get("layer_types")
        or [
            "sliding_attention" if i >= cfg.get("max_window_layers", 28) else "full_attention"
            for i in range(num_layers)
        ]
    )
    if len(types) != num_layers:
        raise ConfigError(
            f"{where}: layer_types has {len(types)} entries for "
            f"num_hidden_layers={num_layers}; give one per layer."
        )
    sliding = [t == "sliding_attention" for t in types]
    if not any(sliding):
        return {"sliding_window": 0}
    first = sliding.index(True)
    if not all(sliding[first:]):
        raise ConfigError(
            f"{where}: layer_types={types} is not supported; jaxtrain slides on "
            "every layer from one index on (max_window_layers), after full "
            "attention on the layers before it."
        )
    return {"sliding_window": int(window), "leading_global_layers": first}


def _moe_fields(cfg: Mapping[str, Any], family: str, where: str) -> dict[str, Any]:
    """The expert keys of a Mixtral or Qwen3-MoE config ({} for dense families).

    transformers' balancing loss counts tokens where jaxtrain's counts assignments (k times
    smaller), so `router_aux_loss_coef` is scaled by k to keep the same training signal.
    """
    if family not in ("mixtral", "qwen3_moe"):
        return {}
    k = int(_require(cfg, "num_experts_per_tok", where))
    fields: dict[str, Any] = dict(
        num_experts_per_tok=k, moe_aux_loss_coef=float(cfg.get("router_aux_loss_coef", 0.0)) * k
    )
    if family == "mixtral":
        return dict(
            fields,
            num_experts=int(_require(cfg, "num_local_experts", where)),
            moe_intermediate_size=int(_require(cfg, "intermediate_size", where)),
            moe_score="topk_softmax",
            moe_norm_topk=True,
        )
    experts = cfg.get("num_experts") or cfg.get("num_local_experts")
    if experts is None:
        raise ConfigError(f"{where}: required key 'num_experts' is missing.")
    return dict(
        fields,
        num_experts=int(experts),
        **_qwen_moe_layers(cfg, where),
        moe_intermediate_size=int(_require(cfg, "moe_intermediate_size", where)),
        moe_score="softmax_topk",
        moe_norm_topk=bool(cfg.get("norm_topk_prob", False)),
    )


def _qwen_moe_layers(cfg: Mapping[str, Any], where: str) -> dict[str, int]:
    """num_dense_layers / moe_layer_step for Qwen3-MoE's expert layers: those not in
    `mlp_only_layers` whose index + 1 is a multiple of `decoder_sparse_step`."""
    layers = int(_require(cfg, "num_hidden_layers", where))
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


def spec_from_hf_config(cfg: Mapping[str, Any] | str | pathlib.Path, **overrides: Any) -> ModelSpec:
    """A `ModelSpec` from a transformers config (dict, `config.json` path or model folder).

    `overrides` set any spec field afterwards, e.g. `param_dtype="bfloat16"`, `remat="full"`.
    Raises ConfigError naming the file and key for anything the decoder cannot express.
    """
    cfg, where = read_hf_config(cfg)
    arch = hf_architecture(cfg, where)
    family = ARCHITECTURES[arch][0]
    if family in SSM_FAMILIES:
        return _checked_spec({**ssm_fields(cfg, family, where), **overrides}, overrides, where)
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ConfigError(f"{where}: hidden_act={act!r} is not supported (SwiGLU needs silu).")
    mlp_bias = bool(cfg.get("mlp_bias", False))
    if mlp_bias and family != "llama":
        raise ConfigError(
            f"{where}: mlp_bias=true ({arch}) is not supported; only "
            "LlamaForCausalLM has MLP biases (its class ignores the key)."
        )
    attention_bias = bool(cfg.get("attention_bias", False))
    if attention_bias and family in DEEPSEEK_FAMILIES:
        raise ConfigError(
            f"{where}: attention_bias=true ({arch}) is not supported with "
            "multi-head latent attention; set it to false."
        )
    # Llama and Qwen 3 put the bias on q, k, v and o alike; Qwen2's q/k/v biases are fixed.
    attention_bias = attention_bias and family in _ATTENTION_BIAS
    hidden = int(_require(cfg, "hidden_size", where))
    heads = int(_require(cfg, "num_attention_heads", where))
    layers = int(_require(cfg, "num_hidden_layers", where))
    if family in _QWEN:
        window = _qwen_window(cfg, layers, where)
    elif family in ("mistral", "mixtral"):
        window = {"sliding_window": int(cfg.get("sliding_window") or 0)}
    elif family == "qwen3_moe" and cfg.get("use_sliding_window"):
        raise ConfigError(f"{where}: use_sliding_window=true is not supported for {arch}.")
    else:
        window = {"sliding_window": 0}
    fields = dict(
        family=family,
        vocab_size=int(_require(cfg, "vocab_size", where)),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        intermediate_size=int(_require(cfg, "intermediate_size", where)),
        max_seq_len=int(_require(cfg, "max_position_embeddings", where)),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=family == "qwen2" or attention_bias,
        o_bias=attention_bias,
        mlp_bias=mlp_bias,
        qk_norm=family in ("qwen3", "qwen3_moe"),
        **window,
        init_std=float(cfg.get("initializer_range", 0.02)),
        **_rope_fields(cfg, where),
        **_moe_fields(cfg, family, where),
    )
    if family in DEEPSEEK_FAMILIES:
        fields.update(deepseek_fields(cfg, family, where))
    elif family in _FAMILY_KEYS:
        fields.update(_FAMILY_KEYS[family][0](cfg, where))
    return _checked_spec({**fields, **overrides}, overrides, where)


def _checked_spec(fields: dict[str, Any], overrides: Mapping[str, Any], where: str) -> ModelSpec:
    """The validated spec of `fields`, naming `where` in its errors."""
    known = {f.name for f in dataclasses.fields(ModelSpec)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"spec overrides {unknown} are not ModelSpec fields.")
    spec = ModelSpec(**fields)
    try:
        spec.validate()
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from e
    return spec


def _check_expressible(spec: ModelSpec, arch: str) -> None:
    """ConfigError when the spec has a feature the family's HF architecture lacks."""
    family = spec.family
    _check_pattern_keys(spec, arch)
    if family in DEEPSEEK_FAMILIES:
        check_deepseek_expressible(spec, arch)
        return
    if family in _FAMILY_KEYS:
        _FAMILY_KEYS[family][1](spec, arch)
        return
    deepseek_only = {
        "kv_lora_rank": spec.mla,
        "num_dense_layers": spec.num_dense_layers and family != "qwen3_moe",
        "moe_shared_experts": spec.moe_shared_experts,
        "moe_score_bias": spec.moe_score_bias,
        "moe_score": spec.moe_score == "sigmoid",
        "moe_topk_method": spec.moe_topk_method != "greedy",
        "moe_routed_scaling": spec.moe_routed_scaling != 1.0,
    }
    for key, used in deepseek_only.items():
        if used:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} has no place in {arch}; "
                "use family 'deepseek_v2' or 'deepseek_v3', or the default."
            )
    wants = {"qwen2": (True, False), "qwen3": (False, True), "qwen3_moe": (False, True)}.get(
        family, (False, False)
    )
    if family in _ATTENTION_BIAS:  # attention_bias: q/k/v and o biases together
        wants = (spec.qkv_bias, wants[1])
        if spec.o_bias != spec.qkv_bias:
            raise ConfigError(
                f"model.o_bias={spec.o_bias} and model.qkv_bias={spec.qkv_bias} "
                f"differ, but {arch}'s attention_bias sets both; set them equal, or use "
                "family 'qwen2' for q/k/v biases alone."
            )
    if (spec.qkv_bias, spec.qk_norm) != wants:
        raise ConfigError(
            f"model.family={family!r} ({arch}) has qkv_bias={wants[0]}, qk_norm={wants[1]} but "
            f"the spec has qkv_bias={spec.qkv_bias}, qk_norm={spec.qk_norm}; use family "
            "'qwen2' for q/k/v biases alone, 'llama' or 'qwen3' for q/k/v and o biases "
            "(o_bias=True), 'qwen3' for qk-norm, 'llama' or 'mistral' for neither."
        )
    moe_family = family in ("mixtral", "qwen3_moe")
    if moe_family != bool(spec.num_experts):
        raise ConfigError(
            f"model.family={family!r} ({arch}) and model.num_experts="
            f"{spec.num_experts} disagree; use family 'mixtral' or 'qwen3_moe' "
            "exactly when num_experts > 0."
        )
    # Top-k then softmax equals softmax, top-k, renormalise: Mixtral's routing either way.
    if family == "mixtral" and (spec.moe_score, spec.moe_norm_topk) == ("softmax_topk", False):
        raise ConfigError(
            "model.family='mixtral' always renormalises its top-k weights; set "
            "model.moe_norm_topk=true or use family 'qwen3_moe'."
        )
    if spec.sliding_window and family == "llama":
        raise ConfigError(
            "model.family='llama' has no sliding window in transformers; use "
            "family 'mistral' (same weights plus a window)."
        )


def _check_pattern_keys(spec: ModelSpec, arch: str) -> None:
    """ConfigError for a gpt-oss / Llama 4 feature on a family whose class lacks it."""
    owners = {
        "attention_sinks": "gpt_oss",
        "o_bias": ("gpt_oss", "llama4", *_ATTENTION_BIAS),
        "mlp_bias": "llama",
        "global_layer_step": ("gpt_oss", "llama4"),
        "leading_global_layers": _QWEN,
        "moe_router_bias": "gpt_oss",
        "moe_expert_bias": "gpt_oss",
        "moe_activation": "gpt_oss",
        "attention_chunk": "llama4",
        "nope_global": "llama4",
        "qk_l2_norm": "llama4",
        "attn_temperature_tuning": "llama4",
        "moe_weight_inputs": "llama4",
        "moe_layer_step": ("llama4", "qwen3_moe"),
        "rope_truncate": "gpt_oss",
        "rope_interleave": ("llama4", "deepseek_v2", "deepseek_v3"),
    }
    # Grok's switches: transformers has no Grok class, so no exported family may carry them.
    owners.update(
        dict.fromkeys(
            (
                "mlp_activation",
                "attn_logit_softcap",
                "attn_temperature_len",
                "router_logit_softcap",
                "final_logit_softcap",
                "post_norms",
                "embed_multiplier",
                "output_multiplier",
                "moe_residual_mlp",
            ),
            "grok",
        )
    )
    defaults = {
        "moe_activation": "swiglu",
        "moe_layer_step": 1,
        "rope_truncate": True,
        "mlp_activation": "swiglu",
        "embed_multiplier": 1.0,
        "output_multiplier": 1.0,
        "attn_logit_softcap": 0.0,
        "attn_temperature_len": 0,
        "router_logit_softcap": 0.0,
        "final_logit_softcap": 0.0,
    }
    for key, families in owners.items():
        families = (families,) if isinstance(families, str) else families
        if getattr(spec, key) != defaults.get(key, False) and spec.family not in families:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} has no place in {arch}; "
                f"use family {' or '.join(map(repr, families))}, or the default."
            )
    if spec.moe_score == "topk_sigmoid" and spec.family != "llama4":
        raise ConfigError(
            f"model.moe_score='topk_sigmoid' has no place in {arch}; use family "
            "'llama4', or another moe_score."
        )


def _rope_parameters(spec: ModelSpec) -> dict[str, Any]:
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


def _moe_config(spec: ModelSpec) -> dict[str, Any]:
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


def hf_config_from_spec(
    spec: ModelSpec, dtype: str | None = None, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A transformers `config.json` dict for the spec's family (llama, qwen2, qwen3, mistral,
    mixtral, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss, llama4).

    `dtype` is the stored weight dtype (default `spec.param_dtype`); `extra` keys (token ids,
    say) are added last. Raises ConfigError when the family cannot express the spec.
    """
    spec.validate()
    if spec.family not in FAMILY_ARCHITECTURE:
        raise ConfigError(
            f"model.family={spec.family!r} has no Hugging Face architecture; "
            f"supported families: {', '.join(sorted(FAMILY_ARCHITECTURE))}."
        )
    arch = FAMILY_ARCHITECTURE[spec.family]
    if spec.family in SSM_FAMILIES:
        weights = dtype or spec.param_dtype
        dtype_key = "dtype" if _transformers_major() >= 5 else "torch_dtype"
        return {
            "architectures": [arch],
            "model_type": ARCHITECTURES[arch][1],
            **ssm_config(spec),
            dtype_key: weights,
            **(extra or {}),
        }
    if spec.block_pattern:
        raise ConfigError(
            f"model.block_pattern={spec.block_pattern!r} (model.family="
            f"{spec.family!r}) has no Hugging Face architecture; use family "
            f"{' / '.join(map(repr, SSM_FAMILIES))}."
        )
    _check_expressible(spec, arch)
    cfg: dict[str, Any] = {
        "architectures": [arch],
        "model_type": ARCHITECTURES[arch][1],
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_seq_len,
        "initializer_range": spec.init_std,
        "rms_norm_eps": spec.norm_eps,
        "tie_word_embeddings": spec.tie_embeddings,
        "attention_dropout": 0.0,
        "use_cache": True,
    }
    if spec.family in _ATTENTION_BIAS:
        cfg["attention_bias"] = spec.qkv_bias
    if spec.family == "llama":
        cfg["mlp_bias"] = spec.mlp_bias
    if spec.family in ("mistral", "mixtral"):
        cfg["sliding_window"] = spec.sliding_window or None
    if spec.family in DEEPSEEK_FAMILIES:
        cfg.update(deepseek_config(spec))
    elif spec.family in _FAMILY_KEYS:
        cfg.update(_FAMILY_KEYS[spec.family][2](spec))
    else:
        cfg.update(_moe_config(spec))
    if spec.family in _QWEN:
        window = bool(spec.sliding_window)
        full = spec.leading_global_layers if window else spec.num_layers
        cfg.update(
            use_sliding_window=window,
            sliding_window=spec.sliding_window or None,
            max_window_layers=full,
            layer_types=[
                "full_attention" if i < full else "sliding_attention"
                for i in range(spec.num_layers)
            ],
        )
    rope = _rope_parameters(spec)
    weight_dtype = dtype or spec.param_dtype
    if _transformers_major() >= 5:
        cfg["rope_parameters"] = {**rope, "rope_theta": spec.rope_theta}
        cfg["dtype"] = weight_dtype
    else:
        cfg["rope_theta"] = spec.rope_theta
        cfg["rope_scaling"] = None if spec.rope_scaling == "none" else rope
        cfg["torch_dtype"] = weight_dtype
    cfg.update(extra or {})
    return cfg
