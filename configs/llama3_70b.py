"""Pretrains Llama 3 70B from scratch on tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/llama3_70b.py --config.data.paths=data/train
4M-token batches of 8192-token sequences, peak lr 1.5e-4 as for Llama 2 70B.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The llama3-70b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "llama3-70b", seq_len=8192, global_batch_size=512, lr=1.5e-4, fsdp_across_hosts=True
    )
