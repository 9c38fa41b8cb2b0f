"""Loading `.py` configs (with `key=value` overrides) and checking them before anything heavy.

A config file defines `get_config(arg=None) -> ConfigDict`; `path.py:arg` passes `arg`. Configs
are locked: a key that does not exist is an error that names it, never a silent new setting.
Foreign configs (Primus/MaxText YAML, TorchTitan/prime-rl TOML, HF config.json) go through
`jaxtrain.compat`.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import json
import os
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from etils import epath
from ml_collections import ConfigDict

from jaxtrain.config.ranges import check_ranges
from jaxtrain.errors import ConfigError, JaxtrainError
from jaxtrain.models.spec.hyperparameters import ModelSpec
from jaxtrain.rundir import object_store

SCHEDULES = ("cosine", "linear", "sqrt", "constant")
DATA_KINDS = ("datatrove", "megatron", "synthetic", "text")
WANDB_MODES = ("", "online", "offline", "disabled")
# checkpoint.compression: the codec of the saved arrays' chunks (Orbax offers zstd or none).
CHECKPOINT_COMPRESSIONS = ("none", "zstd")


def packaged_configs() -> Path:
    """The folder of jaxtrain's own configs (base.py and the presets), wherever it is installed."""
    import jaxtrain.configs  # the package's docstring only: it imports nothing

    return Path(jaxtrain.configs.__file__).resolve().parent


def preset_names() -> list[str]:
    """The config files jaxtrain ships (e.g. "llama2_7b.py")."""
    return sorted(
        p.name
        for p in packaged_configs().glob("*.py")
        if not p.name.startswith("_") and p.name != "presets_common.py"
    )


def find_config_file(path: str) -> Path:
    """A config file by path, or one of jaxtrain's own by name from any folder.

    `configs/llama2_7b.py`, `llama2_7b.py`, `llama2_7b` and the preset name `llama2-7b` (or
    `llama3.1-8b`) all find the shipped file when no such path exists here.
    """
    file = Path(path)
    if file.is_file():
        return file
    stem = file.name.removesuffix(".py")
    names = {f"{stem}.py", f"{stem.replace('-', '_').replace('.', '_')}.py"}
    for name in sorted(names):
        packaged = packaged_configs() / name
        if packaged.is_file() and name in preset_names():
            return packaged
    close = difflib.get_close_matches(
        f"{stem.replace('-', '_').replace('.', '_')}.py", preset_names(), n=4, cutoff=0.6
    )
    hint = (
        f" Shipped configs with similar names: {', '.join(close)}."
        if close
        else " `python -m jaxtrain config --list` lists the shipped ones."
    )
    raise ConfigError(
        f"config file {path!r} does not exist (relative to {Path.cwd()}) and is "
        f"not one of jaxtrain's own configs.{hint}"
    )


def _syntax_error(path: str, file: Path, error: SyntaxError) -> ConfigError:
    """One line naming the file, line and column of a syntax error in a config (or a module
    it imports)."""
    where = f"line {error.lineno}, column {error.offset}: {error.msg}"
    if error.filename and Path(error.filename).resolve() != file.resolve():
        return ConfigError(
            f"config file {path!r} imports {error.filename}, which is not valid Python: {where}."
        )
    return ConfigError(f"config file {path!r} is not valid Python: {where}.")


def _failed(path: str, file: Path, error: Exception, when: str) -> ConfigError:
    """One line for a config that raised: the file, its line that raised and the exception."""
    lines = [
        frame.lineno
        for frame in traceback.extract_tb(error.__traceback__)
        if Path(frame.filename).resolve() == file.resolve()
    ]
    text = str(error).strip().splitlines()
    detail = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
    line = lines[-1] if lines else "?"
    return ConfigError(f"config file {path!r} failed at line {line} {when}: {detail}")


def load_py_config(spec: str) -> ConfigDict:
    """Runs `get_config` of a `.py` config file; `file.py:arg` passes arg to it."""
    path, _, arg = spec.partition(":")
    file = find_config_file(path)
    module_name = f"_jaxtrain_config_{abs(hash(file.resolve()))}"
    module_spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        if e.name != "configs" and not (e.name or "").startswith("configs."):
            raise _failed(path, file, e, "while loading") from None
        raise ConfigError(
            f"config file {path!r} imports `{e.name}`, the configs folder of a "
            "source checkout; jaxtrain's defaults and presets are the package "
            "`jaxtrain.configs` now: write `from jaxtrain.configs import base`."
        ) from None
    except SyntaxError as e:
        raise _syntax_error(path, file, e) from None
    except JaxtrainError:
        raise
    except Exception as e:
        raise _failed(path, file, e, "while loading") from None
    if not hasattr(module, "get_config"):
        raise ConfigError(f"config file {path!r} has no get_config() function.")
    try:
        cfg = module.get_config(arg) if arg else module.get_config()
    except JaxtrainError:
        raise
    except Exception as e:
        raise _failed(path, file, e, "in get_config()") from None
    if not isinstance(cfg, ConfigDict):
        raise ConfigError(
            f"get_config() in {path!r} returned {type(cfg).__name__}, "
            "not an ml_collections.ConfigDict."
        )
    cfg.lock()
    return cfg


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def coerce(value: Any, current: Any, key: str) -> Any:
    """`value` as the type of the setting's current value, or a ConfigError naming `key`.

    The one conversion for every source of a value: command-line text (`--config.a.b=3`), and
    the already-typed values of a notebook mapping or of another stack's YAML/TOML file.
    """
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ConfigError(f"--config.{key}={value!r}: expected true or false.")
    if isinstance(current, int):
        if isinstance(value, bool):
            raise ConfigError(f"--config.{key}={value!r}: expected an integer.")
        try:
            number = float(value) if isinstance(value, float) else int(str(value).strip())
        except ValueError:
            raise ConfigError(f"--config.{key}={value!r}: expected an integer.") from None
        if isinstance(number, float) and not number.is_integer():
            raise ConfigError(f"--config.{key}={value!r}: expected an integer.")
        return int(number)
    if isinstance(current, float):
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"--config.{key}={value!r}: expected a number.") from None
    if isinstance(current, (tuple, list)):
        items = ast.literal_eval(value) if isinstance(value, str) else value
        return type(current)(items)
    if isinstance(current, str):
        return "" if value is None else str(value)
    return value


def apply_overrides(cfg: ConfigDict, overrides: Mapping[str, Any] | Iterable[str]) -> ConfigDict:
    """Sets `a.b=value` strings or a {"a.b": value} mapping; unknown keys raise ConfigError."""
    items = (
        overrides.items()
        if isinstance(overrides, Mapping)
        else (tuple(o.removeprefix("--config.").split("=", 1)) for o in overrides)
    )
    for item in items:
        if len(item) != 2:
            raise ConfigError(f"override {item[0]!r} is not of the form key=value.")
        key, value = item
        parent = cfg
        *parents, leaf = key.split(".")
        for i, part in enumerate(parents):
            if part not in parent or not isinstance(parent[part], ConfigDict):
                raise ConfigError(
                    f"config has no section {'.'.join(parents[: i + 1])!r} (while setting {key!r})."
                )
            parent = parent[part]
        if leaf not in parent:
            raise ConfigError(
                f"config key {key!r} does not exist; known keys in "
                f"{'.'.join(parents) or 'the root'}: {', '.join(sorted(parent))}."
            )
        value = coerce(value, parent[leaf], key)
        with parent.unlocked():
            parent[leaf] = value
    return cfg


FOREIGN_SUFFIXES = (".yaml", ".yml", ".toml", ".json")


def load_config(spec: str, overrides: Mapping[str, Any] | Iterable[str] = ()) -> ConfigDict:
    """A jaxtrain `.py` config (a path or a shipped name) with `a.b=value` overrides applied.

    Configs of other stacks (YAML/TOML/JSON) go through `jaxtrain.compat.load_config_file`,
    which the command line and `jaxtrain.notebook.load_config` use for any file.
    """
    if Path(spec.partition(":")[0]).suffix.lower() in FOREIGN_SUFFIXES:
        raise ConfigError(
            f"{spec} is a config of another stack: load it with "
            "jaxtrain.compat.load_config_file (as the command line and "
            "jaxtrain.notebook.load_config do)."
        )
    return apply_overrides(load_py_config(spec), overrides)


def run_dir(cfg: ConfigDict) -> Path:
    """The run directory: `run.dir`, or runs/<run.name>."""
    return Path(cfg.run.dir or os.path.join("runs", cfg.run.name))


def checkpoint_dir(cfg: ConfigDict) -> Path:
    """The checkpoint folder: `checkpoint.dir` (an `epath.Path` for an s3:// or gs:// URL), or
    <run dir>/checkpoints."""
    if object_store.is_url(cfg.checkpoint.dir):
        return epath.Path(cfg.checkpoint.dir)
    return Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else run_dir(cfg) / "checkpoints"


# The resolved config a run writes into its directory when it starts.
SAVED_CONFIG = "config.json"


def saved_config_path(directory: str | Path) -> Path:
    """Where a run directory keeps the resolved config the run was started with."""
    return Path(directory) / SAVED_CONFIG


def read_saved_config(directory: str | Path) -> ConfigDict:
    """The resolved config of the run in `directory`, with `run.dir` set to that directory.

    The one reader of `<run dir>/config.json`. FileNotFoundError when the directory holds none;
    ConfigError naming the file when it is not a JSON object of sections. The result is not
    locked: a run saved by another version may hold keys today's configs lack.
    """
    path = saved_config_path(directory)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: {directory} is not a jaxtrain run "
            "directory (train once with run.dir pointing there)."
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ConfigError(
            f"{path} is not valid JSON ({e}); write it again from the config the run was "
            "started with (each checkpoint also keeps a copy, in its `config` item)."
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("run", {}), dict):
        raise ConfigError(f"{path} does not hold a jaxtrain config (a JSON object of sections).")
    cfg = ConfigDict(data)
    with cfg.unlocked():
        if "run" not in cfg:
            cfg.run = ConfigDict()
        cfg.run.dir = str(directory)
    return cfg


def split_paths(value: str | Iterable[str]) -> list[str]:
    """`data.paths` as a list: comma-separated text or a sequence."""
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    return [str(p) for p in value]


def micro_batch_size(cfg: ConfigDict) -> int:
    """Sequences per forward/backward pass."""
    return cfg.train.micro_batch_size or cfg.train.global_batch_size


def check_checkpoint_compression(value: str) -> str:
    """`value` when it names a codec of CHECKPOINT_COMPRESSIONS; ConfigError otherwise."""
    if value not in CHECKPOINT_COMPRESSIONS:
        raise ConfigError(
            f"checkpoint.compression={value!r} is not one of "
            f"{CHECKPOINT_COMPRESSIONS}: 'none' writes the arrays as they are (the "
            "default, fastest), 'zstd' compresses each chunk (smaller files, more "
            "CPU time per save and restore)."
        )
    return value


def validate(cfg: ConfigDict) -> ModelSpec:
    """Checks every setting that could fail later and returns the model spec.

    Each failure is a ConfigError naming the key, its value and a fix. The range of every
    number is checked first (`ranges`), then relations between settings. The data
    settings (paths, split, weights) are the data layer's: `jaxtrain.run.validate` checks both.
    """
    check_ranges(cfg)
    spec = ModelSpec.from_config(cfg.model)
    t, o, d = cfg.train, cfg.optim, cfg.data
    micro = micro_batch_size(cfg)
    if micro <= 0 or t.global_batch_size % micro:
        raise ConfigError(
            f"train.global_batch_size={t.global_batch_size} is not a multiple of "
            f"train.micro_batch_size={t.micro_batch_size}; gradient accumulation runs a whole "
            "number of micro batches per step. Pick a micro batch that divides the global one."
        )
    if t.seq_len > spec.max_seq_len:
        raise ConfigError(
            f"train.seq_len={t.seq_len} exceeds model.max_seq_len="
            f"{spec.max_seq_len}; shorten the sequence or raise max_seq_len."
        )
    chunks = t.get("loss_chunks", 0)
    if chunks and t.seq_len % chunks:
        raise ConfigError(
            f"train.loss_chunks={chunks} must be 0 (all logits at once) or a "
            f"divisor of train.seq_len={t.seq_len}: each chunk takes every "
            f"{max(chunks, 1)}-th position of every sequence."
        )
    if chunks and spec.fp8_output_layer:
        raise ConfigError(
            f"model.fp8_output_layer=True and train.loss_chunks={chunks} are both "
            "set: the chunked loss multiplies by the output kernel itself, in "
            "model.dtype; set train.loss_chunks=0 or model.fp8_output_layer=False."
        )
    if chunks and spec.final_logit_softcap:
        raise ConfigError(
            f"model.final_logit_softcap={spec.final_logit_softcap} and "
            f"train.loss_chunks={chunks} are both set: the chunked loss has no "
            "soft-cap on its logits; set train.loss_chunks=0."
        )
    if o.schedule not in SCHEDULES:
        raise ConfigError(f"optim.schedule={o.schedule!r} is not one of {SCHEDULES}.")
    # A warmup longer than the run is allowed: a shortened smoke run of a real recipe simply
    # never leaves its warmup.
    if o.get("after_decay", "min_lr") not in ("min_lr", "zero"):
        raise ConfigError(f"optim.after_decay={o.after_decay!r} is not one of ('min_lr', 'zero').")
    if o.get("warmup_init", 0.0) > o.lr:
        raise ConfigError(f"optim.warmup_init={o.warmup_init} must lie in [0, optim.lr].")
    if o.min_lr > o.lr:
        raise ConfigError(
            f"optim.lr={o.lr} / optim.min_lr={o.min_lr}: need 0 <= min_lr <= lr and lr > 0."
        )
    mode = cfg.get("metrics", {}).get("wandb_mode", "")
    if mode not in WANDB_MODES:
        raise ConfigError(
            f"metrics.wandb_mode={mode!r} is not one of {WANDB_MODES} ('' takes WANDB_MODE)."
        )
    ckpt = cfg.checkpoint
    check_checkpoint_compression(ckpt.get("compression", "none"))
    if not ckpt.resume and ckpt.get("resume_step", -1) != -1:
        raise ConfigError(
            f"checkpoint.resume_step={ckpt.resume_step} asks to resume from that "
            "step, but checkpoint.resume=false asks to start over; drop one."
        )
    if d.kind not in DATA_KINDS:
        raise ConfigError(f"data.kind={d.kind!r} is not one of {DATA_KINDS}.")
    return spec
