"""Pretrains Grok-2 (xAI's 270B mixture of experts) on tokenized (datatrove) shards.

64 blocks of top-2 of 8 GELU-gated experts (16384 wide) beside a dense GeGLU (32768 wide),
router logits capped at 30, attention scores at 30 and output logits at 50, norms before and
after attention and the experts; 269.5B total, 114.9B active.

Run:  python -m jaxtrain --config configs/grok_2.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8; parameters and Adam
moments (~4.3 TB) span hosts, so FSDP runs across them.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The grok-2 pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "grok-2", seq_len=8192, global_batch_size=1024, lr=1e-4, fsdp_across_hosts=True
    )
