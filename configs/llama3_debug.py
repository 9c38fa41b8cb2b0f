"""Trains the tiny Llama 3-style debug model (llama3 RoPE scaling) on synthetic tokens: a smoke run.

Run:  python -m jaxtrain --config configs/llama3_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The llama3-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("llama3-debug")
