"""Pretrains Llama 3.1 405B (llama3 RoPE scaling) from scratch on tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/llama3_1_405b.py --config.data.paths=data/train
Llama 3 paper recipe: peak lr 8e-5, 8000 warmup steps, cosine to 8e-7, 16M-token batches.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The llama3.1-405b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "llama3.1-405b",
        seq_len=8192,
        global_batch_size=2048,
        lr=8e-5,
        min_lr=8e-7,
        warmup_steps=8000,
        fsdp_across_hosts=True,
    )
