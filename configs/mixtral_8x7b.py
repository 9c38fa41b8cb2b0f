"""Pretrains Mixtral 8x7B on tokenized (datatrove) shards.

8 experts, top-2; 46.7B total, 12.9B active.

Run:  python -m jaxtrain --config configs/mixtral_8x7b.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8 (and lower ici_fsdp).
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The mixtral-8x7b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config("mixtral-8x7b", seq_len=4096, global_batch_size=1024, lr=3e-4)
