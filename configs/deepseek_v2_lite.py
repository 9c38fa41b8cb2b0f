"""Pretrains DeepSeek-V2-Lite on tokenized (datatrove) shards.

Latent attention without query compression; 1 dense block then 26 with 64 routed experts
(top-6) and 2 shared ones; 15.7B total, 2.4B active.

Run:  python -m jaxtrain --config configs/deepseek_v2_lite.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8 (and lower ici_fsdp).
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The deepseek-v2-lite pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config("deepseek-v2-lite", seq_len=4096, global_batch_size=4608, lr=4.2e-4)
