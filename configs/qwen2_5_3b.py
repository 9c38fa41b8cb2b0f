"""Pretrains Qwen2.5 3B (qkv bias, tied embeddings) from scratch on tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/qwen2_5_3b.py --config.data.paths=data/train
Llama-style recipe by size (no published Qwen recipe): 4M-token batches, peak lr 3e-4.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The qwen2.5-3b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "qwen2.5-3b", seq_len=8192, global_batch_size=512, lr=3e-4, remat="minimal"
    )
