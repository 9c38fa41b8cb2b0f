"""Trains the tiny Grok-1-style debug model (two blocks of 8 GELU-gated experts, top-2, with
soft-capped attention scores, norms before and after attention and the experts, and tied
embeddings scaled in and out) on synthetic tokens.

Run:  python -m jaxtrain --config configs/grok_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The grok-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("grok-debug")
