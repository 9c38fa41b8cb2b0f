"""Trains the tiny hybrid debug model (Megatron pattern M*M-: Mamba-2, attention without
RoPE, Mamba-2, relu2 MLP) on synthetic tokens.

Run:  python -m jaxtrain --config configs/nemotron_h_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The nemotron-h-debug config; override any key with --config.<key>=<value>."""
    return debug_config("nemotron-h-debug")
