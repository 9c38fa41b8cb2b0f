"""Primus experiment YAMLs resolved as Primus resolves them, then handed to a backend adapter.

An experiment names, per module, a `framework`, a module preset (`config`) and a model preset
(`model`), both looked up under `<primus root>/primus/configs/{modules,models}/<framework>/`,
plus `overrides`. The module preset's keys win over the model preset's (a model key only fills
a key the module lacks), `overrides` are deep-merged on top, then `key=value` command-line
overrides. The Primus root is the nearest folder above the experiment holding
`primus/configs`, or `primus_root`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxtrain.compat.common import known
from jaxtrain.compat.common.report import KeyReport, flatten
from jaxtrain.compat.common.yaml_tree import (
    deep_merge,
    load_mapping,
    overrides_tree,
    read_yaml,
    tag,
)
from jaxtrain.errors import ConfigError

FRAMEWORKS = ("megatron", "torchtitan", "maxtext")
META_KEYS = ("work_group", "user_name", "exp_name", "workspace")
PRESETS_DIR = Path("primus") / "configs"


@dataclasses.dataclass
class Experiment:
    """A resolved Primus experiment: one trainer module's parameters and where each came from."""

    path: Path
    root: Path
    module: str
    framework: str
    params: dict[str, Any]
    origins: dict[str, Any]
    meta: dict[str, Any]
    platform: dict[str, Any]


def is_experiment(doc: Mapping[str, Any]) -> bool:
    """Whether a YAML mapping is a Primus experiment (it lists `modules:`)."""
    return "modules" in doc


def find_primus_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds primus/configs."""
    for folder in (start, *start.parents):
        if (folder / PRESETS_DIR / "modules").is_dir():
            return folder
    return None


def _preset(root: Path, kind: str, framework: str, name: Any, where: str) -> Path:
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"{where}: `{kind[:-1] if kind == 'modules' else 'model'}` must name "
            f"a preset file, got {name!r}."
        )
    filename = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
    base = (root / PRESETS_DIR / kind / framework).resolve()
    path = (base / filename).resolve()
    if base not in path.parents:
        raise ConfigError(f"{where}: preset {name!r} points outside {base}.")
    if not path.is_file():
        raise ConfigError(
            f"{where}: {kind[:-1]} preset {name!r} not found for framework "
            f"{framework!r}; expected {path}."
        )
    return path


def load_experiment(
    path: str | Path,
    env: Mapping[str, str] | None = None,
    primus_root: str | Path | None = None,
    overrides: Sequence[str] = (),
) -> Experiment:
    """Resolves a Primus experiment file to its pre_trainer module's merged parameters."""
    env = os.environ if env is None else env
    path = Path(path)
    exp, _ = load_mapping(path, env)
    modules = exp.get("modules")
    if not isinstance(modules, dict) or not modules:
        raise ConfigError(
            f"{path}: key 'modules' must map module names (pre_trainer) to "
            "their framework, config, model and overrides."
        )
    if "pre_trainer" not in modules:
        raise ConfigError(
            f"{path}: only a `modules.pre_trainer` module is a pretraining "
            f"config; found modules {sorted(modules)}."
        )
    module = modules["pre_trainer"]
    where = f"{path}: modules.pre_trainer"
    if not isinstance(module, dict):
        raise ConfigError(f"{where} must be a mapping, got {module!r}.")
    framework = module.get("framework")
    if framework not in FRAMEWORKS:
        raise ConfigError(
            f"{where}.framework={framework!r} is not supported; supported "
            f"frameworks: {', '.join(FRAMEWORKS)}."
        )
    root = Path(primus_root) if primus_root else find_primus_root(path.resolve().parent)
    if root is None or not (root / PRESETS_DIR).is_dir():
        raise ConfigError(
            f"{path}: cannot find the Primus presets (a folder holding "
            "primus/configs above the experiment); pass --primus-root."
        )
    module_file = _preset(root, "modules", framework, module.get("config"), f"{where}.config")
    model_file = _preset(root, "models", framework, module.get("model"), f"{where}.model")
    params, origins = load_mapping(module_file, env)
    model, model_origins = load_mapping(model_file, env)
    if "model" not in model:  # Primus records the preset's name when the preset has no `model`
        model["model"], model_origins["model"] = module["model"], str(path)
    for key, value in model.items():  # a model key only fills a key the module lacks
        if key not in params and key != "name":
            params[key], origins[key] = value, model_origins[key]
    for key in ("overrides",):
        extra = module.get(key) or {}
        if not isinstance(extra, dict):
            raise ConfigError(f"{where}.{key} must be a mapping, got {extra!r}.")
        params = deep_merge(params, extra)
        origins = deep_merge(origins, tag(extra, str(path)))
    cli = overrides_tree(overrides)
    params = deep_merge(params, cli)
    origins = deep_merge(origins, tag(cli, "command line"))
    meta = {k: exp.get(k) for k in META_KEYS if k in exp}
    meta.update({f"modules.pre_trainer.{k}": module[k] for k in ("framework", "config", "model")})
    return Experiment(
        path, root, "pre_trainer", framework, params, origins, meta, _platform(exp, root, path, env)
    )


def _platform(
    exp: Mapping[str, Any], root: Path, path: Path, env: Mapping[str, str]
) -> dict[str, Any]:
    """The platform preset (platform_azure.yaml unless the experiment names one)."""
    spec = exp.get("platform") or {"config": "platform_azure.yaml"}
    file = root / PRESETS_DIR / "platforms" / str(spec.get("config", "platform_azure.yaml"))
    platform: dict[str, Any] = {}
    if file.is_file():
        platform, _ = load_mapping(file, env)
    platform = deep_merge(platform, spec.get("overrides") or {})
    launcher = root / "runner" / ".primus.yaml"
    direct = (read_yaml(launcher) or {}).get("direct", {}) if launcher.is_file() else {}
    platform["_launcher_nnodes"] = int(direct.get("nnodes", 1) or 1)
    platform["_launcher_gpus_per_node"] = int(direct.get("gpus_per_node", 8) or 8)
    return platform


def experiment_report(
    exp: Experiment, family: str, env: Mapping[str, str] | None = None
) -> KeyReport:
    """A KeyReport over the module's flattened parameters plus the experiment's own keys."""
    values = flatten(exp.params)
    origins = {k: v for k, v in flatten(exp.origins).items() if k in values}
    for key, value in exp.meta.items():
        values[key], origins[key] = value, str(exp.path)
    report = KeyReport(str(exp.path), family, values, origins)
    p = exp.platform
    report.nodes_key = p.get("num_nodes_env_key") or "NNODES"
    keys = (report.nodes_key, p.get("gpus_per_node_env_key") or "GPUS_PER_NODE")
    nodes, gpus, how = known.world_size(
        env, *keys, p["_launcher_nnodes"], p["_launcher_gpus_per_node"]
    )
    report.world_size, report.num_hosts, report.world_source = nodes * gpus, nodes, how
    named = known.named_in_env(os.environ if env is None else env, *keys)
    report.launch = f"{named} in the environment" if named else ""
    report.note(
        f"assumed {nodes} node(s) x {gpus} GPUs = {nodes * gpus} devices ({how}; "
        "Primus launcher defaults otherwise) for per-device batch sizes"
    )
    return report


def map_meta(report: KeyReport) -> dict[str, Any]:
    """run.name / run.dir from the experiment's names (Primus writes to
    <workspace>/<work_group>/<user_name>/<exp_name>)."""
    settings: dict[str, Any] = {}
    name = report.get("exp_name")
    if name:
        settings["run.name"] = str(name)
        report.mapped("exp_name", "run.name")
    parts = [report.get(k) for k in META_KEYS[:3]]
    workspace = report.get("workspace")
    if name and workspace:
        settings["run.dir"] = os.path.join(str(workspace), *(str(p) for p in parts if p))
        for key in ("workspace", "work_group", "user_name"):
            if report.has(key):
                report.mapped(key, "run.dir", "run dir = workspace/work_group/user_name/exp_name")
    for key in ("modules.pre_trainer.framework", "modules.pre_trainer.config"):
        report.mapped(key, "(adapter)", "selects the adapter and the module preset")
    report.mapped(
        "modules.pre_trainer.model", "model.*", "the model preset read for the architecture"
    )
    return settings
