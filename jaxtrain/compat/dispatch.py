"""Bring your torch config: Primus (Megatron / TorchTitan / MaxText backends), native TorchTitan
TOML, MaxText YAML, prime-rl pretraining TOML and Hugging Face config.json files as jaxtrain
configs, each with a report of what became of every source key.

    cfg, report = load_foreign("exp.yaml", ["train.steps=3"], native_overrides=["num_layers=2"])

`overrides` are jaxtrain keys applied after mapping; `native_overrides` are the source format's
own keys (`key=value`, dotted for nested sections) applied before it. Nothing here uses the
network: names that are not local are resolved from offline tables, and the report says so.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ml_collections import ConfigDict

from jaxtrain.compat.common import known
from jaxtrain.compat.common.report import KeyReport, flatten
from jaxtrain.compat.common.target import build
from jaxtrain.compat.common.yaml_tree import (
    deep_merge,
    load_mapping,
    overrides_tree,
    read_yaml,
    tag,
)
from jaxtrain.compat.huggingface import adapter as hf_json
from jaxtrain.compat.maxtext import adapter as maxtext
from jaxtrain.compat.maxtext import files as maxtext_files
from jaxtrain.compat.megatron import adapter as megatron
from jaxtrain.compat.prime_rl import adapter as prime_rl
from jaxtrain.compat.primus import experiment as primus_yaml
from jaxtrain.compat.torchtitan import adapter as torchtitan
from jaxtrain.config import loader as config_lib
from jaxtrain.config.loader import FOREIGN_SUFFIXES
from jaxtrain.errors import ConfigError


def is_foreign(path: str) -> bool:
    """Whether a config path is one of the foreign formats (not a jaxtrain .py config)."""
    return Path(str(path).partition(":")[0]).suffix.lower() in FOREIGN_SUFFIXES


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:  # its message ends "(at line L, column C)"
        raise ConfigError(f"{path}: TOML syntax error: {e}.") from None


def detect(path: Path) -> str:
    """The family of a foreign file: primus, maxtext, torchtitan, prime_rl or hf_json."""
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist.")
    suffix = path.suffix.lower()
    if suffix == ".json":
        if hf_json.is_config(hf_json.read(path)):
            return "hf_json"
        raise ConfigError(
            f"{path}: a JSON config must be a Hugging Face config.json (with "
            "`architectures` or `model_type`)."
        )
    if suffix == ".toml":
        doc = _read_toml(path)
        if prime_rl.is_pretrain(doc):
            return "prime_rl"
        if torchtitan.is_job_config(doc):
            return "torchtitan"
        prime_rl.refuse_other_modes(path, doc)
        raise ConfigError(
            f"{path}: cannot tell whether this TOML is a TorchTitan job config "
            "([job]/[model]/[training]) or a prime-rl pretrain config (mode = "
            '"pretrain").'
        )
    if suffix in (".yaml", ".yml"):
        doc = read_yaml(path)
        if not isinstance(doc, dict):
            raise ConfigError(
                f"{path} holds a {type(doc).__name__}, not a mapping of keys to values."
            )
        if primus_yaml.is_experiment(doc):
            return "primus"
        if maxtext_files.is_config(doc):
            return "maxtext"
        raise ConfigError(
            f"{path}: neither a Primus experiment (no `modules:`) nor a MaxText "
            "config (no base_config/model_name/per_device_batch_size/ici_*)."
        )
    raise ConfigError(
        f"{path}: unknown config format {suffix!r}; expected .py, .yaml, .yml, .toml or .json."
    )


def _toml_report(
    path: Path, family: str, doc: dict[str, Any], native: Sequence[str]
) -> tuple[KeyReport, dict[str, Any]]:
    cli = overrides_tree(native)
    doc = deep_merge(doc, cli)
    origins = deep_merge(tag(doc, str(path)), tag(cli, "command line"))
    values = flatten(doc)
    return KeyReport(str(path), family, values, flatten(origins)), doc


def _adapt(
    path: Path, native: Sequence[str], env: Mapping[str, str], primus_root: Any, maxtext_root: Any
) -> tuple[dict[str, Any], KeyReport]:
    """(settings, report) for a foreign file, whatever its family."""
    family = detect(path)
    if family == "primus":
        with_cli = () if _primus_framework(path, env) == "maxtext" else native
        exp = primus_yaml.load_experiment(path, env, primus_root, with_cli)
        defaults = (str((exp.root / primus_yaml.PRESETS_DIR).resolve()),)
        if exp.framework == "maxtext":
            configs = maxtext_files.configs_dir(path.resolve().parent, maxtext_root, exp.root, env)
            resolved = maxtext_files.resolve(exp.params, exp.origins, path, configs, native, env)
            exp.params, exp.origins = resolved.values, resolved.origins
            defaults += resolved.defaults
        report = primus_yaml.experiment_report(exp, exp.framework, env)
        report.default_origins = defaults
        settings = primus_yaml.map_meta(report)
        if exp.framework == "megatron":
            settings.update(megatron.to_jaxtrain(report, defaults))
        elif exp.framework == "torchtitan":
            settings.update(torchtitan.to_jaxtrain(report, primus=True))
        else:
            for note in resolved.notes:
                report.note(note)
            own = maxtext.to_jaxtrain(report, resolved.from_table)
            for key, target in (
                ("exp_name", "run.name"),
                ("workspace", "run.dir"),
                ("work_group", "run.dir"),
                ("user_name", "run.dir"),
            ):
                if target in own and report.has(key):
                    report.ignored(key, f"MaxText's run_name/base_output_directory set {target}")
            settings.update(own)
        return settings, report
    if family == "maxtext":
        values, origins = load_mapping(path, env)
        configs = maxtext_files.configs_dir(path.resolve().parent, maxtext_root, None, env)
        resolved = maxtext_files.resolve(values, origins, path, configs, native, env)
        report = KeyReport(
            str(path), "maxtext", flatten(resolved.values), flatten(resolved.origins)
        )
        report.default_origins = resolved.defaults
        for note in resolved.notes:
            report.note(note)
        _assume_devices(report, env, known)
        return maxtext.to_jaxtrain(report, resolved.from_table), report
    if family == "hf_json":
        data = deep_merge(hf_json.read(path), overrides_tree(native))
        report = KeyReport(str(path), "hf_json", data, {k: str(path) for k in data})
        return hf_json.to_jaxtrain(report, path), report
    report, doc = _toml_report(path, family, _read_toml(path), native)
    if family == "torchtitan":
        _assume_devices(report, env, known)
        return torchtitan.to_jaxtrain(report), report
    return prime_rl.to_jaxtrain(report, doc), report


def _primus_framework(path: Path, env: Mapping[str, str]) -> Any:
    exp, _ = load_mapping(path, env)
    return ((exp.get("modules") or {}).get("pre_trainer") or {}).get("framework")


def _assume_devices(report: KeyReport, env: Mapping[str, str], known: Any) -> None:
    nodes, gpus, how = known.world_size(env)
    report.world_size, report.num_hosts, report.world_source = nodes * gpus, nodes, how
    named = known.named_in_env(env, "NNODES", "GPUS_PER_NODE")
    report.launch = f"{named} in the environment" if named else ""
    report.note(
        f"assumed {nodes} node(s) x {gpus} devices = {nodes * gpus} ({how}) for "
        "per-device batch sizes"
    )


def load_foreign(
    path: str | Path,
    overrides: Mapping[str, Any] | Iterable[str] = (),
    allow_unsupported: bool = False,
    *,
    native_overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    primus_root: str | None = None,
    maxtext_root: str | None = None,
) -> tuple[ConfigDict, KeyReport]:
    """A locked jaxtrain ConfigDict and the KeyReport for a foreign config file.

    Raises ConfigError for files that cannot be read as configs, and for unsupported keys
    unless `allow_unsupported` (overriding a key's replacement, e.g. --config.data.paths for
    an unreadable dataset, settles it).
    """
    path = Path(path)
    env = os.environ if env is None else env
    settings, report = _adapt(path, list(native_overrides), env, primus_root, maxtext_root)
    cfg = build(settings, path.stem)
    if not settings.get("model.preset"):  # name the preset when the architecture is one
        with cfg.model.unlocked():
            cfg.model.preset = hf_json.matching_preset(dict(cfg.model))
    config_lib.apply_overrides(cfg, overrides)
    items = (
        overrides.items()
        if isinstance(overrides, Mapping)
        else (o.removeprefix("--config.").split("=", 1) for o in overrides)
    )
    report.supersede(k for k, *_ in items)
    try:
        config_lib.validate(cfg)
    except ConfigError as e:
        raise ConfigError(f"{path}: the mapped config does not hold together: {e}") from None
    report.check(allow_unsupported)
    cfg.lock()
    return cfg, report


def load_config_file(
    path: str | Path,
    overrides: Mapping[str, Any] | Iterable[str] = (),
    *,
    native_overrides: Sequence[str] = (),
    allow_unsupported: bool = False,
    env: Mapping[str, str] | None = None,
) -> ConfigDict:
    """Any config file: a jaxtrain `.py` config (by path or shipped name) or one of another
    stack, mapped (unsupported keys refused unless `allow_unsupported`). `native_overrides`
    are `key=value` settings in a foreign file's own terms; `env` (default os.environ) is
    where a foreign file's launch variables (NNODES, GPUS_PER_NODE, ...) are read."""
    if is_foreign(str(path)):
        cfg, _ = load_foreign(
            path, overrides, allow_unsupported, native_overrides=native_overrides, env=env
        )
        return cfg
    if list(native_overrides):
        raise ConfigError(
            f"{path}: `key=value` overrides without --config. apply only to "
            "configs of other stacks (YAML/TOML/JSON); use "
            "--config.section.key=value."
        )
    return config_lib.load_config(str(path), overrides)
