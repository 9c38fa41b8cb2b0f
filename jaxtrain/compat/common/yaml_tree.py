"""YAML files as Primus reads them: `${VAR}` / `${VAR:default}` from the environment, `extends`
chains of presets, and a deep merge in which later files win and lists are replaced whole.

Every value keeps the file it came from (an "origin" tree of the same shape), so the key report
can tell a framework default from a value the experiment set.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from jaxtrain.errors import ConfigError

_ENV = re.compile(r"\$\{([^:{}]+)(?::([^}]*))?\}")
_FLOAT = re.compile(r"^-?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)$")


def scalar(text: str) -> Any:
    """A substituted string as the value it spells: bool, null, int, float, else the string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~"):
        return None
    if re.fullmatch(r"-?\d+", text.strip()):
        return int(text)
    if _FLOAT.fullmatch(text.strip()):
        return float(text)
    return text


def substitute_env(tree: Any, env: Mapping[str, str], where: str, key: str = "") -> Any:
    """Replaces `${VAR}` and `${VAR:default}` in every string of a YAML tree.

    A string that was substituted is re-read as a scalar (so `${TP:1}` is the int 1); one left
    unchanged stays a string. `${VAR}` without a default and without VAR set is a ConfigError
    naming the file, the key and the variable.
    """
    if isinstance(tree, dict):
        return {
            k: substitute_env(v, env, where, f"{key}.{k}" if key else str(k))
            for k, v in tree.items()
        }
    if isinstance(tree, list):
        return [substitute_env(v, env, where, f"{key}[{i}]") for i, v in enumerate(tree)]
    if not isinstance(tree, str):
        return tree

    def replace(match: re.Match) -> str:
        var, default = match.group(1), match.group(2)
        if var in env:
            return env[var]
        if default is None:
            raise ConfigError(
                f"{where}: key {key!r} needs environment variable {var!r} "
                f"(written ${{{var}}} without a default) and it is not set; "
                f"export {var}=... or write ${{{var}:default}}."
            )
        return default

    replaced = _ENV.sub(replace, tree)
    return scalar(replaced) if replaced != tree else tree


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` wins; nested mappings merge key by key; anything else (lists too) is replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(merged.get(key), dict) and isinstance(value, dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def tag(tree: Any, label: str) -> Any:
    """A tree of the same shape whose leaves are all `label` (the origin tree of one file)."""
    if isinstance(tree, dict):
        return {k: tag(v, label) for k, v in tree.items()}
    return label


# libyaml's loader when present: MaxText's base.yml and Megatron's presets are large.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CACHE: dict[tuple[str, int, int], Any] = {}


def read_yaml(path: Path, context: str = "") -> Any:
    """yaml.safe_load of a file; syntax errors and missing files name the file (and line).

    Parsed files are cached by path, size and modification time (a copy is returned).
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} does not exist{context}.")
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key in _CACHE:
        return copy.deepcopy(_CACHE[key])
    try:
        with open(path) as f:
            _CACHE[key] = yaml.load(f, Loader=_LOADER)
        return copy.deepcopy(_CACHE[key])
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: YAML syntax error{line}: {problem}.") from None


def load_mapping(
    path: Path, env: Mapping[str, str], _chain: tuple[Path, ...] = (), context: str = ""
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(values, origins) of a YAML file with its `extends` chain resolved, env substituted.

    Presets listed in `extends` (a string or a list, relative to the including file) merge in
    order, then the file itself on top. A loop, a missing preset, a file that is not a mapping
    or an unset `${VAR}` is a ConfigError naming the file.
    """
    path = Path(path)
    resolved = path.resolve()
    if resolved in _chain:
        loop = " -> ".join(str(p) for p in (*_chain, resolved))
        raise ConfigError(f"extends loop: {loop}.")
    raw = read_yaml(path, context)
    if raw is None:
        raise ConfigError(f"{path} is empty; expected a mapping of keys to values.")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} holds a {type(raw).__name__}, not a mapping of keys to values.")
    raw = substitute_env(raw, env, str(path))
    extends = raw.pop("extends", None) or []
    if isinstance(extends, str):
        extends = [extends]
    if not isinstance(extends, list) or not all(isinstance(e, str) for e in extends):
        raise ConfigError(
            f"{path}: `extends` must be a file name or a list of file names, got {extends!r}."
        )
    values: dict[str, Any] = {}
    origins: dict[str, Any] = {}
    for name in extends:
        sub_values, sub_origins = load_mapping(
            path.parent / name, env, (*_chain, resolved), f" (listed in `extends` of {path})"
        )
        values, origins = deep_merge(values, sub_values), deep_merge(origins, sub_origins)
    return deep_merge(values, raw), deep_merge(origins, tag(raw, str(path)))


def cli_value(text: str) -> Any:
    """A `key=value` command-line value: bool/null/number, a Python literal, else the text."""
    value = scalar(text)
    if isinstance(value, str) and text[:1] in "[({'\"":
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    return value


def overrides_tree(items: Iterable[str], where: str = "command line") -> dict[str, Any]:
    """["a.b=1", "c=x"] -> {"a": {"b": 1}, "c": "x"} (leading dashes are dropped)."""
    tree: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.lstrip("-").partition("=")
        if not sep or not key:
            raise ConfigError(f"{where}: override {item!r} is not of the form key=value.")
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{where}: override {item!r} conflicts with another one.")
        node[leaf] = cli_value(text)
    return tree
