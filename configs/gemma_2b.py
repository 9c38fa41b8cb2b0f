"""Pretrains Gemma 2B (multi-query attention, GeGLU) on tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/gemma_2b.py --config.data.paths=data/train
jaxtrain's recipe (Google's is unpublished): 4M-token batches of 8192-token sequences, peak
lr 0.0003.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The gemma-2b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config("gemma-2b", seq_len=8192, global_batch_size=512, lr=0.0003)
