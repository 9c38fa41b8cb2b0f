"""Trains the tiny Qwen3.5-style dense (Gated DeltaNet and gated attention, SwiGLU MLPs) debug model on synthetic tokens: a smoke run.

Run:  python -m jaxtrain --config configs/qwen3_5_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The qwen3.5-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("qwen3.5-debug")
