"""A Hugging Face `config.json` (or a model folder's, or a model name) as the model of a run.

`python -m jaxtrain --config path/to/config.json` trains jaxtrain's defaults (configs/base.py)
on that architecture; `model_settings` also serves prime-rl's `[model] name`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jaxtrain.compat.common import known
from jaxtrain.compat.common.report import KeyReport
from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_config import spec_from_hf_config
from jaxtrain.models.presets.registry import PRESETS, model_config, preset_names

# config.json fields that spec_from_hf_config reads (it rejects values it cannot express).
ARCH_FIELDS = {
    "architectures": "model.family",
    "model_type": "model.family",
    "vocab_size": "model.vocab_size",
    "hidden_size": "model.hidden_size",
    "intermediate_size": "model.intermediate_size",
    "num_hidden_layers": "model.num_layers",
    "num_attention_heads": "model.num_heads",
    "num_key_value_heads": "model.num_kv_heads",
    "head_dim": "model.head_dim",
    "hidden_act": "(SwiGLU)",
    "mlp_bias": "model.mlp_bias",
    "attention_bias": "model.qkv_bias, model.o_bias",
    "max_position_embeddings": "model.max_seq_len",
    "initializer_range": "model.init_std",
    "rms_norm_eps": "model.norm_eps",
    "tie_word_embeddings": "model.tie_embeddings",
    "rope_theta": "model.rope_theta",
    "rope_scaling": "model.rope_scaling",
    "rope_parameters": "model.rope_*",
    "partial_rotary_factor": "(full rotary)",
    "sliding_window": "model.sliding_window",
    "use_sliding_window": "model.sliding_window",
    "max_window_layers": "model.leading_global_layers",
    "layer_types": "model.sliding_window, model.leading_global_layers",
    "decoder_sparse_step": "model.moe_layer_step",
    "mlp_only_layers": "model.num_dense_layers, model.moe_layer_step",
}
_RUNTIME = (
    "not an architecture field: token ids, dtypes, caching and metadata do not change "
    "the model (spec_from_hf_config rejects fields that would)"
)
# ModelSpec fields that are run choices rather than architecture (training-loss weights
# included): a preset matches whatever they are.
_RUN_CHOICES = frozenset(
    {
        "preset",
        "max_seq_len",
        "dtype",
        "param_dtype",
        "remat",
        "scan_layers",
        "attention_impl",
        "attention_block",
        "init_std",
        "moe_aux_loss_coef",
        "moe_z_loss_coef",
        "moe_bias_update_rate",
        "moe_capacity_factor",
    }
)


def matching_preset(fields: dict[str, Any]) -> str:
    """The preset with the same architecture (every ModelSpec field but the run choices), or
    ""."""
    for name in preset_names():
        preset = model_config(name)
        if all(preset[k] == fields.get(k) for k in preset if k not in _RUN_CHOICES):
            return name
    return ""


def spec_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """model.* settings for a transformers config dict."""
    spec = spec_from_hf_config(cfg)
    fields = dict(model_config("llama-debug"))
    fields.update({k: getattr(spec, k) for k in fields if hasattr(spec, k)})
    fields["preset"] = matching_preset(fields)
    return {f"model.{k}": v for k, v in fields.items()}


def model_settings(name: str, report: KeyReport, key: str) -> dict[str, Any]:
    """model.* settings for a model name: a local folder, the HF cache, else the offline table.
    Records `key` in the report; ConfigError when none of the three knows the name."""
    cfg, where = known.hf_config_dict(name)
    if cfg is not None:
        settings = spec_settings(cfg)
        report.mapped(key, "model.*", f"architecture from {where}")
        folder = known.local_tokenizer_folder(name)
        if folder:
            settings["data.tokenizer"] = folder
        return settings
    preset = known.preset_for_hf_name(name)
    if preset is None:
        known_names = ", ".join(sorted(known.HF_PRESETS))
        raise ConfigError(
            f"{report.source}: {key}={name!r} has no config.json in a local "
            "folder or the Hugging Face cache, and is not in jaxtrain's offline "
            f"table ({known_names}); give a local model folder."
        )
    report.mapped(
        key,
        "model.*",
        f"jaxtrain preset {preset}: {name} is not available "
        "locally, its published architecture comes from jaxtrain's offline table",
    )
    report.note(
        f"{name}: architecture from jaxtrain's offline table (preset {preset}); no network was used"
    )
    settings = {f"model.{k}": v for k, v in model_config(preset).items()}
    settings["model.preset"] = preset
    return settings


def to_jaxtrain(report: KeyReport, path: Path) -> dict[str, Any]:
    """Settings for a config.json: the model from it, everything else from configs/base.py."""
    settings = spec_settings(dict(report.values))
    for key in report.values:
        if key.split(".")[0] in ARCH_FIELDS:
            report.mapped(key, ARCH_FIELDS[key.split(".")[0]])
    folder = known.local_tokenizer_folder(str(path.parent))
    if folder:
        settings["data.tokenizer"] = folder
        report.note(f"tokenizer files beside the config: data.tokenizer={folder}")
    report.finish((("*", _RUNTIME),))
    if settings["model.preset"] in PRESETS:
        report.note(f"same architecture as jaxtrain preset {settings['model.preset']}")
    return settings


def is_config(data: dict[str, Any]) -> bool:
    """Whether a JSON object is a Hugging Face config (it names `architectures` or
    `model_type`)."""
    return "architectures" in data or "model_type" in data


def read(path: Path) -> dict[str, Any]:
    """The JSON object of a config.json (ConfigError naming the file and line otherwise)."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{path}: JSON syntax error at line {e.lineno}, column {e.colno}: {e.msg}."
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a {type(data).__name__}, not a JSON object.")
    return data
