"""Trains the tiny Mixtral-style debug model (4 experts, top-2) on synthetic tokens: a smoke run.

Run:  python -m jaxtrain --config configs/mixtral_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The mixtral-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("mixtral-debug")
