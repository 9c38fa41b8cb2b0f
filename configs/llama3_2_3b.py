"""Pretrains Llama 3.2 3B (tied embeddings) from scratch on tokenized (datatrove) shards.

Run:  python -m jaxtrain --config configs/llama3_2_3b.py --config.data.paths=data/train
4M-token batches of 8192-token sequences; small enough to keep the weight matmuls' outputs.
"""

from jaxtrain.configs.presets_common import pretrain_config
from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    """The llama3.2-3b pretraining config; override any key with --config.<key>=<value>."""
    return pretrain_config(
        "llama3.2-3b", seq_len=8192, global_batch_size=512, lr=3e-4, remat="minimal"
    )
