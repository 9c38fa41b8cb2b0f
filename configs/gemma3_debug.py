"""Trains the tiny Gemma 3-style debug model (qk-norm, a sliding block with its own RoPE base and a global one) on synthetic tokens: a smoke run.

Run:  python -m jaxtrain --config configs/gemma3_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The gemma3-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("gemma3-debug")
