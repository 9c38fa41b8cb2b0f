"""Trains the tiny Zebra-Llama debug model (pattern *-G-K-M-: latent attention, Gated DeltaNet,
Kimi delta attention and Mamba-2 blocks, each followed by a SwiGLU MLP) on synthetic tokens.

Run:  python -m jaxtrain --config configs/zebra_llama_debug.py
"""

from jaxtrain.configs.presets_common import debug_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The zebra-llama-debug config; override any key with --config.<key>=<value>."""
    return debug_config("zebra-llama-debug")
