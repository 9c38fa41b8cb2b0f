"""Pretrains Llama 3.1 70B (llama3 RoPE scaling) from scratch on tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/llama3_1_70b.py --config.data.paths=data/train
4M-token batches of 8192-token sequences (the pre-long-context stage), peak lr 1.5e-4.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The llama3.1-70b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "llama3.1-70b", seq_len=8192, global_batch_size=512, lr=1.5e-4, fsdp_across_hosts=True
    )
