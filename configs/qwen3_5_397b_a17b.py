"""Pretrains the Qwen3.5-397B-A17B text model (three Gated DeltaNet layers per gated attention
layer, 512 experts, top-10, a gated shared expert) on tokenized (datatrove) shards.

396.3B total, 17.3B active (embeddings included; the vision encoder is not built).

Run:  python -m jaxtrain --config configs/qwen3_5_397b_a17b.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8 (and lower ici_fsdp).
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The qwen3.5-397b-a17b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config("qwen3.5-397b-a17b", seq_len=4096, global_batch_size=1024, lr=3e-4)
