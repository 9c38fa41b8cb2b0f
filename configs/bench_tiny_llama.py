"""The CPU benchmark shape: a 4-layer Llama (d=256, GQA 8/4 heads, SwiGLU 688, vocab 8192)
trained on synthetic sequences of 256 tokens, batch 8, float32, AdamW.

Run:  python -m jaxtrain bench --config configs/bench_tiny_llama.py --steps 20
Side by side with transformers + torch:  python tools/bench_vs_torch.py
"""

from jaxtrain.configs import base
from ml_collections import ConfigDict

from jaxtrain.models.presets.registry import model_config


def get_config() -> ConfigDict:
    """The benchmark shape; `--config.model.dtype=bfloat16` for bf16 compute."""
    c = base.get_config()
    with c.unlocked():
        c.model = model_config(
            "llama-debug",
            vocab_size=8192,
            hidden_size=256,
            num_layers=4,
            num_heads=8,
            num_kv_heads=4,
            head_dim=32,
            intermediate_size=688,
            max_seq_len=1024,
        )
        c.model.preset = "bench-tiny-llama"
        # Four layers compile in seconds unrolled, and the unrolled step skips the scan's
        # stacking of each layer's activations for the backward pass (7-10% of a CPU step).
        c.model.scan_layers = False
    c.run.name = "bench_tiny_llama"
    c.train.seq_len = 256
    c.train.global_batch_size = 8
    c.data.kind = "synthetic"
    c.optim.warmup_steps = 0
    c.checkpoint.every = 0
    return c
