"""The embedded demo: a small Llama trained on English that ships with Python, fully offline.

Run:  python -m jaxtrain --config configs/demo.py

On first use it builds data/demo/ from the prose of the standard library's docstrings and pydoc
topics (about 2M characters), trains a 4096-token byte-level BPE on it, and writes train/val
datatrove shards. It then trains a 1.4M-parameter Llama for 1400 small steps (a minute or two on
CPU), validating every 200 steps, and ends by continuing a prompt with the trained model
(KV-cache sampling). Afterwards:  python -m jaxtrain sample --run runs/demo --prompt "The module"

The shape was chosen by measurement (docs/quickstart.md): in a fixed couple of CPU minutes the
loss is limited by the number of optimizer steps, so a narrow two-layer model taking many
batches of 8 beats wider, deeper or larger-batch runs of the same cost.
"""

from jaxtrain.configs import base
from ml_collections import ConfigDict

from jaxtrain.models.presets.registry import model_config


def get_config() -> ConfigDict:
    """The demo run; any key can be overridden, e.g. --config.train.steps=50."""
    c = base.get_config()
    with c.unlocked():
        c.model = model_config(
            "llama-debug",
            vocab_size=4096,
            hidden_size=128,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            head_dim=32,
            intermediate_size=384,
            max_seq_len=1024,
        )
        c.model.preset = "demo"
        # Two layers compile in seconds unrolled, and the unrolled step skips the scan's
        # stacking of each layer's activations for the backward pass (7-10% of a CPU step at
        # four layers, docs/performance.md).
        c.model.scan_layers = False
    c.run.name = "demo"
    c.train.steps = 1400
    c.train.seq_len = 128
    c.train.global_batch_size = 8
    c.train.log_every = 50
    c.train.eval_every = 200
    c.train.eval_batches = 24  # the whole validation split (about 25K tokens)
    c.optim.lr = 3e-3
    c.optim.min_lr = 3e-4
    c.optim.warmup_steps = 20
    c.optim.weight_decay = 0.1
    c.data.kind = "datatrove"
    c.data.prepare = "demo"
    c.data.paths = "data/demo/train"
    c.data.val_paths = "data/demo/val"
    c.data.tokenizer = "data/demo/tokenizer"
    c.checkpoint.every = 700
    c.sample.prompt = "The module"
    c.sample.max_new_tokens = 40
    c.sample.temperature = 0.7
    c.sample.top_k = 40
    return c
