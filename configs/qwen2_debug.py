"""Trains the tiny Qwen2-style debug model (qkv bias) on synthetic tokens: a smoke run.

Run:  python -m jaxtrain --config configs/qwen2_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The qwen2-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("qwen2-debug")
