"""Pretrains Grok-1 (xAI's 314B mixture of experts) on tokenized (datatrove) shards.

64 blocks of top-2 of 8 GELU-gated experts (32768 wide), attention scores soft-capped at 30,
norms before and after attention and the experts, tied embeddings scaled by sqrt(6144) in and
1/sqrt(3) out; 315.7B total, 83.8B active (embedding counted once).

Run:  python -m jaxtrain --config configs/grok_1.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8; parameters and Adam
moments (~5 TB) span hosts, so FSDP runs across them.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The grok-1 pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "grok-1", seq_len=8192, global_batch_size=1024, lr=1e-4, fsdp_across_hosts=True
    )
