"""Trains the tiny gpt-oss-style debug model (a sliding block then a full one, attention
sinks, biased projections, 4 biased experts with the clamped SwiGLU) on synthetic tokens.

Run:  python -m jaxtrain --config configs/gpt_oss_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The gpt-oss-debug smoke-run config; override any key with --config.<key>=<value>."""
    return debug_config("gpt-oss-debug")
