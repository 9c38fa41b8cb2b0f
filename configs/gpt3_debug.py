"""Trains the tiny GPT-3-style debug model (learned positions, LayerNorms, GELU MLPs, biases everywhere) on synthetic tokens: a smoke run.

Run:  python -m jaxtrain --config configs/gpt3_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The gpt3-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("gpt3-debug")
