"""Trains the tiny Mistral-style debug model (32-token sliding window) on synthetic tokens.

Run:  python -m jaxtrain --config configs/mistral_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The mistral-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("mistral-debug")
