"""Pretrains Qwen3-235B-A22B on tokenized (datatrove) shards.

128 experts, top-8; 235B total, 22B active.

Run:  python -m jaxtrain --config configs/qwen3_235b_a22b.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis; parameters over every host (fsdp_across_hosts).
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The qwen3-235b-a22b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "qwen3-235b-a22b", seq_len=4096, global_batch_size=1024, lr=1.5e-4, fsdp_across_hosts=True
    )
