"""Pretrains Primus' Zebra-Llama 300M pure Kimi delta attention (12 KDA + 12 SwiGLU sublayers of
1024; tied embeddings, 303.5M) on tokenized (datatrove) shards, as
zebra_llama_300M_kda_pure-pretrain.yaml does.

Run:  python -m jaxtrain --config configs/zebra_llama_300m_kda.py --config.data.paths=data/train
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The zebra-llama-300m-kda config; override any key with --config.<key>=<value>."""
    return pretrain_config("zebra-llama-300m-kda", seq_len=2048, global_batch_size=64, lr=2e-4)
