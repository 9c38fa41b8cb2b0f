"""Pretrains Qwen3-30B-A3B on tokenized (datatrove) shards.

128 experts, top-8; 30.5B total, 3.3B active.

Run:  python -m jaxtrain --config configs/qwen3_30b_a3b.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8 (and lower ici_fsdp).
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The qwen3-30b-a3b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config("qwen3-30b-a3b", seq_len=4096, global_batch_size=1024, lr=3e-4)
