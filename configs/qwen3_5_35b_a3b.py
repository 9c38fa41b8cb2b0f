"""Pretrains the Qwen3.5-35B-A3B text model (three Gated DeltaNet layers per gated attention
layer, 256 experts, top-8, a gated shared expert) on tokenized (datatrove) shards.

34.7B total, 3.5B active (embeddings included; the vision encoder is not built).

Run:  python -m jaxtrain --config configs/qwen3_5_35b_a3b.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8 (and lower ici_fsdp).
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The qwen3.5-35b-a3b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config("qwen3.5-35b-a3b", seq_len=4096, global_batch_size=1024, lr=3e-4)
