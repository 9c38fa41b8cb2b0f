"""Pretrains DeepSeek-V3 (the 671B base model, without its multi-token-prediction module) on
tokenized (datatrove) shards.

Latent attention; 3 dense blocks then 58 with 256 sigmoid-routed experts (top-8 from 4 of 8
groups) and 1 shared one; auxiliary-loss-free balancing moves each expert's bias by 0.001 per
step; 671B total, 37B active.

Run:  python -m jaxtrain --config configs/deepseek_v3.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8; parameters and Adam
moments (~8 TB) span hosts, so FSDP runs across them.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The deepseek-v3 pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "deepseek-v3", seq_len=4096, global_batch_size=3072, lr=2.2e-4, fsdp_across_hosts=True
    )
