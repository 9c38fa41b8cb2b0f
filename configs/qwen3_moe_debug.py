"""Trains the tiny Qwen3-MoE-style debug model (8 experts, top-2) on synthetic tokens.

Run:  python -m jaxtrain --config configs/qwen3_moe_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The qwen3-moe-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("qwen3-moe-debug")
