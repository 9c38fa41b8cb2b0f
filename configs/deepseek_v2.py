"""Pretrains DeepSeek-V2 on tokenized (datatrove) shards.

Latent attention; 1 dense block then 59 with 160 routed experts (top-6 from 3 of 8 groups) and
2 shared ones; 236B total, 21B active.

Run:  python -m jaxtrain --config configs/deepseek_v2.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8; parameters and Adam
moments (~2.8 TB) span hosts, so FSDP runs across them.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The deepseek-v2 pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "deepseek-v2", seq_len=4096, global_batch_size=2304, lr=2.4e-4, fsdp_across_hosts=True
    )
