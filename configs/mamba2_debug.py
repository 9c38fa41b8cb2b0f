"""Trains the tiny Mamba-2 debug model (two SSD mixer layers) on synthetic tokens.

Run:  python -m jaxtrain --config configs/mamba2_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The mamba2-debug config; override any key with --config.<key>=<value>."""
    return debug_config("mamba2-debug")
