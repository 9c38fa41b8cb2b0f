"""Pretrains OLMo 3 7B (three sliding-window blocks per global one, YaRN on the global ones) on
tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/olmo3_7b.py --config.data.paths=data/train
jaxtrain's recipe: 4M-token batches of 8192-token sequences, peak lr 0.0003.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The olmo3-7b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config("olmo3-7b", seq_len=8192, global_batch_size=512, lr=0.0003)
