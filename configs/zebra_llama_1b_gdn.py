"""Pretrains Primus' Zebra-Llama 1B pure Gated DeltaNet (16 GDN + 16 SwiGLU sublayers of 2048;
tied embeddings, 1.20B) on tokenized (datatrove) shards, as zebra_llama_1B_gdn_pure-pretrain.yaml
does.

Run:  python -m jaxtrain --config configs/zebra_llama_1b_gdn.py --config.data.paths=data/train
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The zebra-llama-1b-gdn config; override any key with --config.<key>=<value>."""
    return pretrain_config("zebra-llama-1b-gdn", seq_len=2048, global_batch_size=448, lr=2e-4)
