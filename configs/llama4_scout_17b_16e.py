"""Pretrains the Llama 4 Scout text model (17B active, 16 experts) on tokenized (datatrove)
shards.

48 blocks: 8192-token chunked attention with RoPE and L2 qk-norm, every fourth block global
NoPE attention with temperature tuning; top-1 sigmoid routing over 16 experts plus a shared
expert in every block; 107.8B total (Meta's 109B adds the vision encoder), 17.2B active.

Run:  python -m jaxtrain --config configs/llama4_scout_17b_16e.py --config.data.paths=data/train
Experts shard over the `expert` mesh axis: add --config.mesh.ici_expert=8; parameters and Adam
moments (~1.7 TB) span hosts, so FSDP runs across them.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The llama4-scout-17b-16e pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "llama4-scout-17b-16e", seq_len=8192, global_batch_size=512, lr=3e-4, fsdp_across_hosts=True
    )
