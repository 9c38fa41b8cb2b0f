"""Pretrains Mamba-1 130M (state-spaces/mamba-130m sizes: 24 layers of 768, state 16) on
tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/mamba_130m.py --config.data.paths=data/train
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The mamba-130m config; override any key with --config.<key>=<value>."""
    return pretrain_config("mamba-130m", seq_len=2048, global_batch_size=256, lr=6e-4)
