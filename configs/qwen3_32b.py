"""Pretrains Qwen3 32B (qk-norm) from scratch on tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/qwen3_32b.py --config.data.paths=data/train
Llama-style recipe by size (no published Qwen recipe): 4M-token batches, peak lr 1.5e-4.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The qwen3-32b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "qwen3-32b", seq_len=8192, global_batch_size=512, lr=1.5e-4, fsdp_across_hosts=True
    )
