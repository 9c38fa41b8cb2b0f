"""Loading `.py` configs (with `key=value` overrides) and checking them before anything heavy.

A config file defines `get_config(arg=None) -> ConfigDict`; `path.py:arg` passes `arg`. Configs
are locked: a key that does not exist is an error that names it, never a silent new setting.
Foreign configs (Primus/MaxText YAML, TorchTitan/prime-rl TOML, HF config.json) go through
`jaxtrain.compat`.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ml_collections import ConfigDict

from jaxtrain.config_ranges import check_ranges
from jaxtrain.models.spec import ConfigError, ModelSpec

SCHEDULES = ("cosine", "linear", "sqrt", "constant")
DATA_KINDS = ("datatrove", "megatron", "synthetic")


def load_py_config(spec: str) -> ConfigDict:
    """Runs `get_config` of a `.py` config file; `file.py:arg` passes arg to it."""
    path, _, arg = spec.partition(":")
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {path!r} does not exist.")
    module_name = f"_jaxtrain_config_{abs(hash(file.resolve()))}"
    module_spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(module_spec)
    # Config files import each other (`from configs import base`) relative to the project.
    sys.path.insert(0, str(file.resolve().parent.parent))
    try:
        module_spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    if not hasattr(module, "get_config"):
        raise ConfigError(f"config file {path!r} has no get_config() function.")
    cfg = module.get_config(arg) if arg else module.get_config()
    if not isinstance(cfg, ConfigDict):
        raise ConfigError(f"get_config() in {path!r} returned {type(cfg).__name__}, "
                          "not an ml_collections.ConfigDict.")
    cfg.lock()
    return cfg


def _parse_value(text: str, current: Any, key: str) -> Any:
    """Turns override text into the type of the current value."""
    if isinstance(current, bool):
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"--config.{key}={text!r}: expected true or false.")
    if isinstance(current, int):
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"--config.{key}={text!r}: expected an integer.") from None
    if isinstance(current, float):
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"--config.{key}={text!r}: expected a number.") from None
    if isinstance(current, (tuple, list)):
        return type(current)(ast.literal_eval(text))
    return text


def apply_overrides(cfg: ConfigDict, overrides: Mapping[str, Any] | Iterable[str]) -> ConfigDict:
    """Sets `a.b=value` strings or a {"a.b": value} mapping; unknown keys raise ConfigError."""
    items = overrides.items() if isinstance(overrides, Mapping) else (
        tuple(o.removeprefix("--config.").split("=", 1)) for o in overrides)
    for item in items:
        if len(item) != 2:
            raise ConfigError(f"override {item[0]!r} is not of the form key=value.")
        key, value = item
        parent = cfg
        *parents, leaf = key.split(".")
        for i, part in enumerate(parents):
            if part not in parent or not isinstance(parent[part], ConfigDict):
                raise ConfigError(f"config has no section {'.'.join(parents[:i + 1])!r} "
                                  f"(while setting {key!r}).")
            parent = parent[part]
        if leaf not in parent:
            raise ConfigError(f"config key {key!r} does not exist; known keys in "
                              f"{'.'.join(parents) or 'the root'}: {', '.join(sorted(parent))}.")
        if isinstance(value, str):
            value = _parse_value(value, parent[leaf], key)
        with parent.unlocked():
            parent[leaf] = value
    return cfg


def load_config(spec: str, overrides: Mapping[str, Any] | Iterable[str] = (), *,
                native_overrides: Iterable[str] = (), allow_unsupported: bool = False
                ) -> ConfigDict:
    """Loads a config file and applies overrides; the notebook and CLI entry point.

    `.py` files are jaxtrain configs; `.yaml`/`.yml`/`.toml`/`.json` are Primus, MaxText,
    TorchTitan, prime-rl or Hugging Face configs mapped by `jaxtrain.compat` (which errors on
    keys it cannot reproduce unless `allow_unsupported`); `native_overrides` are `key=value`
    settings in the foreign file's own terms, applied before the mapping.
    """
    from jaxtrain import compat  # the adapters import this module

    if compat.is_foreign(spec):
        cfg, _ = compat.load_foreign(spec, overrides, allow_unsupported,
                                     native_overrides=list(native_overrides))
        return cfg
    if list(native_overrides):
        raise ConfigError(f"{spec}: `key=value` overrides without --config. apply only to "
                          "foreign (YAML/TOML/JSON) configs; use --config.section.key=value.")
    return apply_overrides(load_py_config(spec), overrides)


def run_dir(cfg: ConfigDict) -> Path:
    """The run directory: `run.dir`, or runs/<run.name>."""
    return Path(cfg.run.dir or os.path.join("runs", cfg.run.name))


def checkpoint_dir(cfg: ConfigDict) -> Path:
    """The checkpoint folder: `checkpoint.dir`, or <run dir>/checkpoints."""
    return Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else run_dir(cfg) / "checkpoints"


def split_paths(value: str | Iterable[str]) -> list[str]:
    """`data.paths` as a list: comma-separated text or a sequence."""
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    return [str(p) for p in value]


def micro_batch_size(cfg: ConfigDict) -> int:
    """Sequences per forward/backward pass."""
    return cfg.train.micro_batch_size or cfg.train.global_batch_size


def validate(cfg: ConfigDict, check_data: bool = True) -> ModelSpec:
    """Checks every setting that could fail later and returns the model spec.

    Each failure is a ConfigError naming the key, its value and a fix. The range of every
    number is checked first (`config_ranges`), then relations between settings. `check_data=False`
    skips the checks that need the data on disk (for printing or inspecting a config).
    """
    check_ranges(cfg)
    spec = ModelSpec.from_config(cfg.model)
    t, o, d = cfg.train, cfg.optim, cfg.data
    micro = micro_batch_size(cfg)
    if micro <= 0 or t.global_batch_size % micro:
        raise ConfigError(
            f"train.global_batch_size={t.global_batch_size} is not a multiple of "
            f"train.micro_batch_size={t.micro_batch_size}; gradient accumulation runs a whole "
            "number of micro batches per step. Pick a micro batch that divides the global one.")
    if t.seq_len > spec.max_seq_len:
        raise ConfigError(f"train.seq_len={t.seq_len} exceeds model.max_seq_len="
                          f"{spec.max_seq_len}; shorten the sequence or raise max_seq_len.")
    chunks = t.get("loss_chunks", 0)
    if chunks and t.seq_len % chunks:
        raise ConfigError(f"train.loss_chunks={chunks} must be 0 (all logits at once) or a "
                          f"divisor of train.seq_len={t.seq_len}: each chunk takes every "
                          f"{max(chunks, 1)}-th position of every sequence.")
    if o.schedule not in SCHEDULES:
        raise ConfigError(f"optim.schedule={o.schedule!r} is not one of {SCHEDULES}.")
    # A warmup longer than the run is allowed: a shortened smoke run of a real recipe simply
    # never leaves its warmup.
    if o.get("after_decay", "min_lr") not in ("min_lr", "zero"):
        raise ConfigError(f"optim.after_decay={o.after_decay!r} is not one of ('min_lr', "
                          "'zero').")
    if o.get("warmup_init", 0.0) > o.lr:
        raise ConfigError(f"optim.warmup_init={o.warmup_init} must lie in [0, optim.lr].")
    if o.min_lr > o.lr:
        raise ConfigError(f"optim.lr={o.lr} / optim.min_lr={o.min_lr}: need 0 <= min_lr <= lr "
                          "and lr > 0.")
    ckpt = cfg.checkpoint
    if not ckpt.resume and ckpt.get("resume_step", -1) != -1:
        raise ConfigError(f"checkpoint.resume_step={ckpt.resume_step} asks to resume from that "
                          "step, but checkpoint.resume=false asks to start over; drop one.")
    if d.kind not in DATA_KINDS:
        raise ConfigError(f"data.kind={d.kind!r} is not one of {DATA_KINDS}.")
    # Imported here: the data layer imports this module.
    from jaxtrain.data.sources import validate_data_config

    validate_data_config(cfg, check_data)
    return spec
