"""Pretrains OLMo 3 32B (three sliding-window blocks per global one, YaRN on the global ones) on
tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/olmo3_32b.py --config.data.paths=data/train
jaxtrain's recipe: 8M-token batches of 8192-token sequences, peak lr 0.0002.
fsdp_across_hosts: its float32 weights and Adam moments do not fit in one 8-accelerator host.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The olmo3-32b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "olmo3-32b", seq_len=8192, global_batch_size=1024, lr=0.0002, fsdp_across_hosts=True
    )
