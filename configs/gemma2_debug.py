"""Trains the tiny Gemma 2-style debug model (post-norms, a sliding and a global block, soft-capped scores and logits) on synthetic tokens: a smoke run.

Run:  python -m jaxtrain --config configs/gemma2_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The gemma2-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("gemma2-debug")
