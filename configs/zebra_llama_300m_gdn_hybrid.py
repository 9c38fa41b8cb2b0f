"""Pretrains Primus' Zebra-Llama 300M hybrid (3 latent-attention + 9 Gated DeltaNet mixers, each
followed by a SwiGLU MLP, width 1024; tied embeddings, 309.3M) on tokenized (datatrove) shards, as
zebra_llama_300M_gdn_hybrid-pretrain.yaml does.

Run:  python -m jaxtrain --config configs/zebra_llama_300m_gdn_hybrid.py --config.data.paths=data/train
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The zebra-llama-300m-gdn-hybrid config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "zebra-llama-300m-gdn-hybrid", seq_len=2048, global_batch_size=64, lr=2e-4
    )
