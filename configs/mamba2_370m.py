"""Pretrains Mamba-2 370M (state-spaces/mamba2-370m sizes: 48 layers of 1024, state 128) on
tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/mamba2_370m.py --config.data.paths=data/train
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The mamba2-370m config; override any key with --config.<key>=<value>."""
    return pretrain_config("mamba2-370m", seq_len=2048, global_batch_size=256, lr=3e-4)
