"""Pretrains Mamba-2 130M (state-spaces/mamba2-130m sizes: 24 layers of 768, state 128) on
tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/mamba2_130m.py --config.data.paths=data/train
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The mamba2-130m config; override any key with --config.<key>=<value>."""
    return pretrain_config("mamba2-130m", seq_len=2048, global_batch_size=256, lr=6e-4)
