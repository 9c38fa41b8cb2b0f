"""Pretrains GPT-3 175B (learned positions, LayerNorms, GELU MLPs; every layer dense, as
MaxText's gpt3 block) on tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/gpt3_175b.py --config.data.paths=data/train
The paper's recipe: 1536 sequences of 2048 tokens (3.1M tokens) a batch, peak lr 6e-5 warmed
up over 375M tokens, cosine decay to a tenth over 300B tokens.
fsdp_across_hosts: its float32 weights and Adam moments do not fit in one 8-accelerator host.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The gpt3-175b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "gpt3-175b",
        seq_len=2048,
        global_batch_size=1536,
        lr=6e-5,
        warmup_steps=120,
        train_tokens=300_000_000_000,
        fsdp_across_hosts=True,
    )
