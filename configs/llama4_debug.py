"""Trains the tiny Llama-4-style debug model (a dense chunked-RoPE block then an expert
global-NoPE block with a shared expert and top-1 sigmoid routing) on synthetic tokens.

Run:  python -m jaxtrain --config configs/llama4_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The llama4-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("llama4-debug")
