"""Trains the tiny OLMo 3-style debug model (norms after the sublayers only, qk-norm across heads, a sliding block and a global one with YaRN) on synthetic tokens: a smoke run.

Run:  python -m jaxtrain --config configs/olmo3_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The olmo3-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("olmo3-debug")
