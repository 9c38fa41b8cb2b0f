"""Pretrains the Llama 4 Maverick text model (17B active, 128 experts) on tokenized
(datatrove) shards.

48 blocks alternating dense and expert feed-forward (top-1 sigmoid routing over 128 experts
plus a shared expert); chunked RoPE attention with every fourth block global NoPE; 400.7B
total, 17.2B active.

Run:  python -m jaxtrain --config configs/llama4_maverick_17b_128e.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8; parameters and Adam
moments (~6.4 TB) span hosts, so FSDP runs across them.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The llama4-maverick-17b-128e pretraining config; override keys with --config.<key>=..."""
    return pretrain_config(
        "llama4-maverick-17b-128e",
        seq_len=8192,
        global_batch_size=512,
        lr=3e-4,
        fsdp_across_hosts=True,
    )
