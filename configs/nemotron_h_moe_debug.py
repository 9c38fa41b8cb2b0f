"""Trains the tiny hybrid mixture-of-experts debug model (Megatron pattern ME*EM-: Mamba-2,
experts, attention without RoPE, experts, Mamba-2, relu2 MLP; the experts relu2 with a shared
expert, routed by sigmoid scores with a score-correction bias, as Nemotron 3) on synthetic
tokens.

Run:  python -m jaxtrain --config configs/nemotron_h_moe_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The nemotron-h-moe-debug config; override any key with --config.<key>=<value>."""
    return debug_config("nemotron-h-moe-debug")
