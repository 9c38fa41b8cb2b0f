"""Trains the tiny Llama 2-style debug model on synthetic tokens: a smoke run.

Run:  python -m jaxtrain --config configs/llama_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The llama-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("llama-debug")
