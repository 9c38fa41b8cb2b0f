"""Trains the tiny Mamba-1 debug model (two selective-scan layers) on synthetic tokens.

Run:  python -m jaxtrain --config configs/mamba_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The mamba-debug config; override any key with --config.<key>=<value>."""
    return debug_config("mamba-debug")
