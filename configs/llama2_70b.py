"""Pretrains Llama 2 70B from scratch on tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/llama2_70b.py --config.data.paths=data/train
Llama 2 recipe: 4M-token batches of 4096-token sequences, peak lr 1.5e-4, 2000 warmup steps.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The llama2-70b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "llama2-70b", seq_len=4096, global_batch_size=1024, lr=1.5e-4, fsdp_across_hosts=True
    )
