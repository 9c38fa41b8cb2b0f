"""Pretrains Mistral 7B v0.1 (4096-token sliding window) on tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/mistral_7b.py --config.data.paths=data/train
Llama-style 7B recipe: 4M-token batches of 8192-token sequences, peak lr 3e-4.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The mistral-7b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config("mistral-7b", seq_len=8192, global_batch_size=512, lr=3e-4)
