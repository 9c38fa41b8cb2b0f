"""Trains the tiny Gemma-style debug model (GeGLU, 1 + w RMSNorms, scaled and tied embeddings) on synthetic tokens: a smoke run.

Run:  python -m jaxtrain --config configs/gemma_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The gemma-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("gemma-debug")
