"""Pretrains gpt-oss-120b on tokenized (datatrove) shards.

36 blocks alternating 128-token sliding and full attention with per-head sinks; 128 experts,
top-4, with biases and a clamped SwiGLU; 116.8B total, 5.1B active (embedding left out).

Run:  python -m jaxtrain --config configs/gpt_oss_120b.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8; parameters and Adam
moments (~1.9 TB) span hosts, so FSDP runs across them.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The gpt-oss-120b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "gpt-oss-120b", seq_len=4096, global_batch_size=1024, lr=3e-4, fsdp_across_hosts=True
    )
