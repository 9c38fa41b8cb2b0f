"""The embedded demo: a small Llama trained on English that ships with Python, fully offline.

Run:  python -m jaxtrain --config configs/demo.py

On first use it builds data/demo/ from the standard library's docstrings and pydoc topics
(about 3.4M characters), trains a 4096-token byte-level BPE on it, and writes train/val
datatrove shards. It then trains a ~3M-parameter Llama for a few minutes on CPU, validating every
50 steps, and ends by continuing a prompt with the trained model (KV-cache sampling).
Afterwards:  python -m jaxtrain sample --run runs/demo --prompt "The module"
"""

from jaxtrain.configs import base
from ml_collections import ConfigDict

from jaxtrain.models.presets import model_config


def get_config() -> ConfigDict:
    """The demo run; any key can be overridden, e.g. --config.train.steps=50."""
    c = base.get_config()
    with c.unlocked():
        c.model = model_config("llama-debug", vocab_size=4096, hidden_size=192, num_layers=4,
                               num_heads=6, num_kv_heads=2, head_dim=32,
                               intermediate_size=512, max_seq_len=1024)
        c.model.preset = "demo"
        # Four layers compile in seconds unrolled, and the unrolled step skips the scan's
        # stacking of each layer's activations for the backward pass (7-10% of a CPU step).
        c.model.scan_layers = False
    c.run.name = "demo"
    c.train.steps = 150
    c.train.seq_len = 128
    c.train.global_batch_size = 32
    c.train.log_every = 10
    c.train.eval_every = 50
    c.train.eval_batches = 6
    c.optim.lr = 3e-3
    c.optim.min_lr = 3e-4
    c.optim.warmup_steps = 20
    c.optim.weight_decay = 0.1
    c.data.kind = "datatrove"
    c.data.prepare = "demo"
    c.data.paths = "data/demo/train"
    c.data.val_paths = "data/demo/val"
    c.data.tokenizer = "data/demo/tokenizer"
    c.checkpoint.every = 100
    c.sample.prompt = "The module"
    c.sample.max_new_tokens = 40
    c.sample.temperature = 0.8
    c.sample.top_k = 40
    return c
