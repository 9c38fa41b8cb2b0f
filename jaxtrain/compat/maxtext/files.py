"""MaxText's own config files resolved as its pyconfig does: `base_config` chains (relative to
the file, else MaxText's configs folder), then `models/<model_name>.yml` over them, then
command-line overrides (which win over the model file only with override_model_config).

MaxText's configs folder is looked up beside the file, under MAXTEXT_CONFIGS_DIR or
`maxtext_root`, in a Primus checkout's third_party/maxtext, and in any `maxtext` or `MaxText`
checkout found in a folder above the file. When none is found, the defaults below (those of
MaxText's base.yml) and the model table stand in, and the report says so.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxtrain.compat.common.yaml_tree import deep_merge, load_mapping, overrides_tree, tag
from jaxtrain.errors import ConfigError

_CONFIG_DIRS = (Path("src/maxtext/configs"), Path("src/MaxText/configs"), Path("MaxText/configs"))
OFFLINE = "MaxText default (jaxtrain's offline copy)"
# The base.yml defaults of every key the adapter reads.
DEFAULTS: dict[str, Any] = {
    "model_name": "default",
    "override_model_config": False,
    "run_name": "",
    "base_output_directory": "",
    "steps": 150_001,
    "learning_rate": 3e-5,
    "lr_schedule_type": "cosine",
    "learning_rate_final_fraction": 0.1,
    "warmup_steps_fraction": 0.1,
    "learning_rate_schedule_steps": -1,
    "per_device_batch_size": 12.0,
    "gradient_accumulation_steps": 1,
    "max_target_length": 2048,
    "opt_type": "adamw",
    "adam_b1": 0.9,
    "adam_b2": 0.95,
    "adam_eps": 1e-8,
    "adam_eps_root": 0.0,
    "adam_weight_decay": 0.1,
    "gradient_clipping_threshold": 1.0,
    "z_loss_multiplier": 0.0,
    "dtype": "bfloat16",
    "weight_dtype": "float32",
    "remat_policy": "full",
    "scan_layers": True,
    "dataset_type": "tfds",
    "init_weights_seed": 0,
    "eval_interval": -1,
    "eval_steps": -1,
    "enable_checkpointing": True,
    "checkpoint_period": 10_000,
    "decoder_block": "llama2",
    "global_parameter_scale": 1,
    "base_emb_dim": 2048,
    "base_num_query_heads": 16,
    "base_num_kv_heads": 16,
    "base_mlp_dim": 7168,
    "base_num_decoder_layers": 16,
    "head_dim": 128,
    "mlp_activations": ["silu", "linear"],
    "logits_via_embedding": False,
    "normalize_embedding_logits": True,
    "normalization_layer_epsilon": 1e-5,
    "vocab_size": 32_000,
    "num_experts": 1,
    "rope_type": "default",
    "rope_max_timescale": 10_000,
    "rope_min_timescale": 1,
    "rope_linear_scaling_factor": 1.0,
    # YaRN's settings: a model file with rope_type yarn (DeepSeek's) sets only some of them.
    "max_position_embeddings": 163_840,
    "original_max_position_embeddings": 4096,
    "rope_factor": 40,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "rope_interleave": True,
    "rope_truncate": True,
    "rope_attention_scaling": False,
    "use_qk_norm": False,
    "attention_bias": False,
    "attention_type": "global",
    "sliding_window_size": 0,
    "dropout_rate": 0.0,
    "enable_dropout": True,
    "ici_data_parallelism": 1,
    "ici_fsdp_parallelism": -1,
    "ici_tensor_parallelism": 1,
    "ici_sequence_parallelism": 1,
    "ici_context_parallelism": 1,
    "ici_expert_parallelism": 1,
    "ici_pipeline_parallelism": 1,
    "dcn_data_parallelism": -1,
    "dcn_fsdp_parallelism": 1,
    "dcn_tensor_parallelism": 1,
    "dcn_sequence_parallelism": 1,
    "dcn_context_parallelism": 1,
    "dcn_expert_parallelism": 1,
    "dcn_pipeline_parallelism": 1,
}


# Keys a MaxText YAML nearly always sets (besides its ici_*/dcn_* mesh sizes).
_HINTS = (
    "base_config",
    "model_name",
    "per_device_batch_size",
    "max_target_length",
    "base_emb_dim",
    "ici_fsdp_parallelism",
    "dcn_data_parallelism",
)


def is_config(doc: Mapping[str, Any]) -> bool:
    """Whether a YAML mapping is a MaxText config: one of its usual keys, or an ici_*/dcn_*
    mesh size."""
    return any(k in doc for k in _HINTS) or any(str(k).startswith(("ici_", "dcn_")) for k in doc)


def configs_dir(
    start: Path,
    maxtext_root: str | Path | None = None,
    primus_root: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Path | None:
    """MaxText's configs folder (the one holding base.yml), or None."""
    env = os.environ if env is None else env
    candidates: list[Path] = []
    for root in (maxtext_root, env.get("MAXTEXT_ROOT")):
        if root:
            candidates += [Path(root) / d for d in _CONFIG_DIRS] + [Path(root)]
    if env.get("MAXTEXT_CONFIGS_DIR"):
        candidates.append(Path(env["MAXTEXT_CONFIGS_DIR"]))
    if primus_root:
        candidates += [primus_root / "third_party" / "maxtext" / d for d in _CONFIG_DIRS]
    for folder in (start, *start.parents):
        candidates.append(folder)
        for name in ("maxtext", "MaxText"):
            candidates += [folder / name / d for d in _CONFIG_DIRS]
    return next((c for c in candidates if (c / "base.yml").is_file()), None)


@dataclasses.dataclass
class Resolved:
    """A MaxText config after its base config, its model file and the command line."""

    values: dict[str, Any]
    origins: dict[str, Any]
    notes: list[str]
    from_table: str  # model name to take from jaxtrain's table ("" when its file was read)
    defaults: tuple[str, ...]  # origins that are MaxText's defaults: the base files, offline


def _base_chain(
    values: dict[str, Any],
    origins: dict[str, Any],
    where: Path,
    configs: Path | None,
    env: Mapping[str, str],
) -> tuple[dict, dict, str, tuple[str, ...]]:
    """Values under their `base_config` (recursively), or the offline defaults; the last item
    names the base files read."""
    base = values.get("base_config")
    if not base:
        return values, origins, "", ()
    path = Path(str(base))
    if not path.is_absolute():
        beside = where.parent / path
        path = beside if beside.is_file() else (configs / path if configs else beside)
    if not path.is_file():
        merged = deep_merge(DEFAULTS, values)
        return (
            merged,
            deep_merge(tag(DEFAULTS, OFFLINE), origins),
            (
                f"MaxText's {base} was not found (pass --maxtext-root); its defaults come from "
                "jaxtrain's offline copy of the keys it reads"
            ),
            (),
        )
    base_values, base_origins = load_mapping(path, env)
    base_values, base_origins, note, chain = _base_chain(
        base_values, base_origins, path, configs, env
    )
    return (
        deep_merge(base_values, values),
        deep_merge(base_origins, origins),
        note,
        (str(path), *chain),
    )


def resolve(
    values: dict[str, Any],
    origins: dict[str, Any],
    where: Path,
    configs: Path | None,
    cli: Sequence[str],
    env: Mapping[str, str],
) -> Resolved:
    """A MaxText config after its base config, its model file and the command line.

    As in MaxText, only what differs from base.yml counts as set: the base files' keys (and,
    for `base.yml model_name=X`, the loaded base.yml's own) are defaults; the model file's and
    the command line's are the config's.
    """
    values, origins, note, chain = _base_chain(values, origins, where, configs, env)
    notes = [note] if note else []
    defaults = (*chain, OFFLINE)
    if "base_config" not in values:
        if configs is not None and where.resolve() == (configs / "base.yml").resolve():
            defaults += (str(where),)  # MaxText's own base.yml, invoked with model_name=...
        else:
            values = deep_merge(DEFAULTS, values)
            origins = deep_merge(tag(DEFAULTS, OFFLINE), origins)
            notes.append("no base_config: MaxText's defaults come from jaxtrain's offline copy")
    from_table = ""
    cli_tree = overrides_tree(cli)
    merged = deep_merge(values, cli_tree)
    name = str(merged.get("model_name", "default")).replace("-Instruct", "")
    if name != "default":
        folder = configs or where.parent
        found = next(
            (
                p
                for p in (
                    where.parent / "models" / f"{name}.yml",
                    folder / "models" / f"{name}.yml",
                )
                if p.is_file()
            ),
            None,
        )
        if found:
            model, _ = load_mapping(found, env)
            if merged.get("override_model_config"):
                model = {k: v for k, v in model.items() if k not in cli_tree}
            else:
                clash = sorted(k for k in model if k in cli_tree and cli_tree[k] != model[k])
                if clash:
                    raise ConfigError(
                        f"{where}: keys {clash} are set both by "
                        f"{found} and on the command line; MaxText refuses that "
                        "unless override_model_config=true."
                    )
            values = deep_merge(values, model)
            origins = deep_merge(origins, tag(model, str(found)))
        else:
            notes.append(
                f"MaxText's models/{name}.yml was not found; the architecture comes "
                "from jaxtrain's offline table of MaxText model names"
            )
            from_table = name
    return Resolved(
        deep_merge(values, cli_tree),
        deep_merge(origins, tag(cli_tree, "command line")),
        notes,
        from_table,
        defaults,
    )
