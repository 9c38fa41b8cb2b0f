"""Pretrains Qwen3-Next-80B-A3B (three Gated DeltaNet layers per gated attention layer, 512
experts, top-10, a gated shared expert) on tokenized (datatrove) shards.

79.7B total, 3.9B active (embeddings included).

Run:  python -m jaxtrain --config configs/qwen3_next_80b_a3b.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8 (and lower ici_fsdp).
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The qwen3-next-80b-a3b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config("qwen3-next-80b-a3b", seq_len=4096, global_batch_size=1024, lr=3e-4)
