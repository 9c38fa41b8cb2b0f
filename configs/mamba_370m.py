"""Pretrains Megatron / Primus' Mamba 370M (48 Mamba-2 layers of 1024, state 16, 8 groups; tied
embeddings) on tokenized (datatrove) shards, as Primus' mamba_370M-pretrain.yaml does.

Run:  python -m jaxtrain --config configs/mamba_370m.py --config.data.paths=data/train
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The mamba-370m config; override any key with --config.<key>=<value>."""
    return pretrain_config("mamba-370m", seq_len=2048, global_batch_size=416, lr=3e-4)
