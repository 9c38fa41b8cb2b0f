"""Trains the tiny DeepSeek-V2-style debug model (latent attention, one dense block, then
8 experts in 4 groups plus a shared expert) on synthetic tokens.

Run:  python -m jaxtrain --config configs/deepseek_v2_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The deepseek-v2-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("deepseek-v2-debug")
