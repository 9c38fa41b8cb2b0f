"""Pretrains gpt-oss-20b on tokenized (datatrove) shards.

24 blocks alternating 128-token sliding and full attention with per-head sinks; 32 experts,
top-4, with biases and a clamped SwiGLU; 20.9B total, 3.6B active (embedding left out).

Run:  python -m jaxtrain --config configs/gpt_oss_20b.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8 (and lower ici_fsdp).
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The gpt-oss-20b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config("gpt-oss-20b", seq_len=4096, global_batch_size=1024, lr=3e-4)
