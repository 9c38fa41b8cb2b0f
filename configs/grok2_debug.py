"""Trains the tiny Grok-2-style debug model (Grok-1's blocks plus a dense GeGLU beside the
experts, soft-capped router and output logits, an untied output and a log2 query temperature
past 8 tokens) on synthetic tokens.

Run:  python -m jaxtrain --config configs/grok2_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The grok2-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("grok2-debug")
