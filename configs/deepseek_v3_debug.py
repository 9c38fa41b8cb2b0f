"""Trains the tiny DeepSeek-V3-style debug model (latent attention, one dense block, then
8 sigmoid-routed experts in 4 groups with the aux-free bias, plus a shared expert) on synthetic
tokens.

Run:  python -m jaxtrain --config configs/deepseek_v3_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The deepseek-v3-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("deepseek-v3-debug")
