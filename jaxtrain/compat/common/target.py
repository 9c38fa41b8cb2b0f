"""The jaxtrain side of a mapping: configs/base.py with an adapter's settings applied.

Adapters produce flat `{"section.key": value}` settings; `build` coerces each to the type of the
default it replaces, so a locked, type-checked ConfigDict comes out. `has_key` lets an adapter
map a source key only where this checkout's config has a home for it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ml_collections import ConfigDict

from jaxtrain.config import loader as config_lib
from jaxtrain.configs import base
from jaxtrain.errors import ConfigError


@functools.lru_cache(maxsize=1)
def _base_keys() -> frozenset[str]:
    cfg = base_config()
    return frozenset(f"{section}.{key}" for section in cfg for key in cfg[section])


def base_config() -> ConfigDict:
    """A fresh copy of jaxtrain.configs.base (the defaults every setting starts from)."""
    return base.get_config()


def has_key(key: str) -> bool:
    """Whether `section.key` exists in jaxtrain's config."""
    return key in _base_keys()


def build(settings: Mapping[str, Any], name: str) -> ConfigDict:
    """configs/base.py with the settings applied (run.name defaults to `name`)."""
    cfg = base_config()
    for key, value in {"run.name": name, **settings}.items():
        section, _, leaf = key.partition(".")
        node = cfg.get(section)
        if node is None or leaf not in node:
            raise ConfigError(f"adapter setting {key!r} is not a jaxtrain config key.")
        with node.unlocked():
            node[leaf] = config_lib.coerce(value, node[leaf], key)
    return cfg
