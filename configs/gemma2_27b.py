"""Pretrains Gemma 2 27B on tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/gemma2_27b.py --config.data.paths=data/train
jaxtrain's recipe (Google's is unpublished): 4M-token batches of 8192-token sequences, peak
lr 0.00015.
fsdp_across_hosts: its float32 weights and Adam moments do not fit in one 8-accelerator host.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The gemma2-27b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "gemma2-27b", seq_len=8192, global_batch_size=512, lr=0.00015, fsdp_across_hosts=True
    )
