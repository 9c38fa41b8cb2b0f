"""Hugging Face `config.json` <-> `ModelSpec`, for Llama 2/3, Qwen 2.5/3, Mistral, Mixtral,
Qwen3-MoE, DeepSeek V2/V3, gpt-oss, Llama 4 text, Gemma 1/2/3 text, OLMo 3, GPT-3 as GPT-2,
Qwen3-Next and Qwen3.5 text (the keys of the last seven live in `hf_deepseek`, `hf_gpt_oss`,
`hf_llama4`, `hf_gemma`, `hf_olmo3`, `hf_gpt2` and `hf_qwen3_next`; the rotary keys in
`hf_rope_keys`, the Mixtral and Qwen3-MoE expert keys in `hf_moe_keys`, what each class can
express in `hf_expressible`).

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
from jaxtrain.interop.hf_expressible import (
    ATTENTION_BIAS,
    QWEN,
    check_expressible,
    check_pattern_keys,
)
from jaxtrain.interop.hf_gemma import (
    GEMMA_ARCHITECTURES,
    GEMMA_FAMILIES,
    check_gemma_expressible,
    gemma3_rope_config,
    gemma_config,
    gemma_fields,
)
from jaxtrain.interop.hf_gpt2 import (
    GPT2_ARCHITECTURES,
    check_gpt2_expressible,
    gpt2_config,
    gpt2_fields,
)
from jaxtrain.interop.hf_gpt_oss import check_gpt_oss_expressible, gpt_oss_config, gpt_oss_fields
from jaxtrain.interop.hf_llama4 import check_llama4_expressible, llama4_config, llama4_fields
from jaxtrain.interop.hf_moe_keys import moe_config, moe_fields, require
from jaxtrain.interop.hf_olmo3 import (
    OLMO3_ARCHITECTURES,
    check_olmo3_expressible,
    olmo3_config,
    olmo3_fields,
    olmo3_rope_config,
)
from jaxtrain.interop.hf_qwen3_next import (
    QWEN3_NEXT_ARCHITECTURES,
    QWEN3_NEXT_FAMILIES,
    check_qwen3_next_expressible,
    qwen3_next_config,
    qwen3_next_fields,
)
from jaxtrain.interop.hf_rope_keys import rope_fields, rope_parameters
from jaxtrain.interop.hf_ssm import SSM_ARCHITECTURES, SSM_FAMILIES, ssm_config, ssm_fields
from jaxtrain.models.spec.hyperparameters import ModelSpec

# Families whose keys live in their own module: (read fields, check a spec, write keys).
_FAMILY_KEYS = {
    "gpt_oss": (gpt_oss_fields, check_gpt_oss_expressible, gpt_oss_config),
    "llama4": (llama4_fields, check_llama4_expressible, llama4_config),
    "olmo3": (olmo3_fields, check_olmo3_expressible, olmo3_config),
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
    **GEMMA_ARCHITECTURES,
    **OLMO3_ARCHITECTURES,
    **GPT2_ARCHITECTURES,
    **SSM_ARCHITECTURES,
    **QWEN3_NEXT_ARCHITECTURES,
}
FAMILY_ARCHITECTURE = {family: arch for arch, (family, _) in ARCHITECTURES.items()}
_MODEL_TYPE_ARCHITECTURE = {mt: arch for arch, (_, mt) in ARCHITECTURES.items()}


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
    if family == "gpt3":  # GPT-2's keys: hf_gpt2
        return _checked_spec({**gpt2_fields(cfg, where), **overrides}, overrides, where)
    if family in QWEN3_NEXT_FAMILIES:  # hybrid stacks of paired sublayers: hf_qwen3_next
        fields = qwen3_next_fields(cfg, family, where)
        return _checked_spec({**fields, **overrides}, overrides, where)
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish") and family not in GEMMA_FAMILIES:  # GeGLU: hf_gemma
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
    attention_bias = attention_bias and family in ATTENTION_BIAS
    hidden = int(require(cfg, "hidden_size", where))
    heads = int(require(cfg, "num_attention_heads", where))
    layers = int(require(cfg, "num_hidden_layers", where))
    if family in QWEN:
        window = _qwen_window(cfg, layers, where)
    elif family in ("mistral", "mixtral"):
        window = {"sliding_window": int(cfg.get("sliding_window") or 0)}
    elif family == "qwen3_moe" and cfg.get("use_sliding_window"):
        raise ConfigError(f"{where}: use_sliding_window=true is not supported for {arch}.")
    else:
        window = {"sliding_window": 0}
    fields = dict(
        family=family,
        vocab_size=int(require(cfg, "vocab_size", where)),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        intermediate_size=int(require(cfg, "intermediate_size", where)),
        max_seq_len=int(require(cfg, "max_position_embeddings", where)),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=family == "qwen2" or attention_bias,
        o_bias=attention_bias,
        mlp_bias=mlp_bias,
        qk_norm=family in ("qwen3", "qwen3_moe"),
        **window,
        init_std=float(cfg.get("initializer_range", 0.02)),
        **rope_fields(cfg, where),
        **moe_fields(cfg, family, where),
    )
    if family in GEMMA_FAMILIES:
        fields.update(gemma_fields(cfg, family, where))
    elif family in DEEPSEEK_FAMILIES:
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


def hf_config_from_spec(
    spec: ModelSpec, dtype: str | None = None, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A transformers `config.json` dict for the spec's family (llama, qwen2, qwen3, mistral,
    mixtral, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss, llama4, gemma*, olmo3, gpt3 as
    GPT-2, the state-space families).

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
    if spec.family in QWEN3_NEXT_FAMILIES:
        check_qwen3_next_expressible(spec, arch)
        dtype_key = "dtype" if _transformers_major() >= 5 else "torch_dtype"
        return {
            "architectures": [arch],
            "model_type": ARCHITECTURES[arch][1],
            **qwen3_next_config(spec, _transformers_major()),
            dtype_key: dtype or spec.param_dtype,
            **(extra or {}),
        }
    if spec.family == "gpt3":
        check_gpt2_expressible(spec, arch)
        dtype_key = "dtype" if _transformers_major() >= 5 else "torch_dtype"
        return {
            "architectures": [arch],
            "model_type": ARCHITECTURES[arch][1],
            **gpt2_config(spec),
            dtype_key: dtype or spec.param_dtype,
            **(extra or {}),
        }
    if spec.block_pattern:
        raise ConfigError(
            f"model.block_pattern={spec.block_pattern!r} (model.family="
            f"{spec.family!r}) has no Hugging Face architecture; use family "
            f"{' / '.join(map(repr, SSM_FAMILIES))}."
        )
    check_pattern_keys(spec, arch)
    if spec.family in DEEPSEEK_FAMILIES:
        check_deepseek_expressible(spec, arch)
    elif spec.family in _FAMILY_KEYS:
        _FAMILY_KEYS[spec.family][1](spec, arch)
    elif spec.family in GEMMA_FAMILIES:
        check_gemma_expressible(spec, arch)
    else:
        check_expressible(spec, arch)
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
    if spec.family in ATTENTION_BIAS:
        cfg["attention_bias"] = spec.qkv_bias
    if spec.family == "llama":
        cfg["mlp_bias"] = spec.mlp_bias
    if spec.family in ("mistral", "mixtral"):
        cfg["sliding_window"] = spec.sliding_window or None
    if spec.family in DEEPSEEK_FAMILIES:
        cfg.update(deepseek_config(spec))
    elif spec.family in _FAMILY_KEYS:
        cfg.update(_FAMILY_KEYS[spec.family][2](spec))
    elif spec.family in GEMMA_FAMILIES:
        cfg.update(gemma_config(spec))
    else:
        cfg.update(moe_config(spec))
    if spec.family in QWEN:
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
    rope = rope_parameters(spec)
    weight_dtype = dtype or spec.param_dtype
    if _transformers_major() >= 5:
        cfg["rope_parameters"] = {**rope, "rope_theta": spec.rope_theta}
        cfg["dtype"] = weight_dtype
    else:
        cfg["rope_theta"] = spec.rope_theta
        cfg["rope_scaling"] = None if spec.rope_scaling == "none" else rope
        cfg["torch_dtype"] = weight_dtype
    if spec.family in ("gemma3", "olmo3"):  # one rotary entry per layer type
        for key in ("rope_parameters", "rope_theta", "rope_scaling"):
            cfg.pop(key, None)
        layouts = {"gemma3": gemma3_rope_config, "olmo3": olmo3_rope_config}
        cfg.update(layouts[spec.family](spec, _transformers_major()))
    cfg.update(extra or {})
    return cfg
