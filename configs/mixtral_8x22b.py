"""Pretrains Mixtral 8x22B on tokenized (datatrove) shards.

8 experts, top-2; 141B total, 39B active.

Run:  python -m jaxtrain --config configs/mixtral_8x22b.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis; parameters over every host (fsdp_across_hosts).
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The mixtral-8x22b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "mixtral-8x22b", seq_len=4096, global_batch_size=1024, lr=2e-4, fsdp_across_hosts=True
    )
