"""Builders shared by the per-model config files in this folder (no `get_config` here).

`pretrain_config` turns `base.py` into a pretraining run of a named preset: bfloat16 compute on
float32 master weights, real (datatrove) data, warmup then cosine decay to a tenth of the peak.
`debug_config` does the same for the tiny debug sizes, which train on synthetic tokens.
"""

from __future__ import annotations

from jaxtrain.configs import base
from ml_collections import ConfigDict

from jaxtrain.models.presets.registry import model_config


def pretrain_config(
    preset: str,
    *,
    seq_len: int,
    global_batch_size: int,
    lr: float,
    min_lr: float | None = None,
    warmup_steps: int = 2000,
    train_tokens: int = 1_000_000_000_000,
    remat: str = "full",
    fsdp_across_hosts: bool = False,
) -> ConfigDict:
    """A pretraining config for `preset` that runs `train_tokens` tokens (the decay horizon).

    `fsdp_across_hosts` shards parameters and optimizer state over every host instead of
    replicating them per host: a 70B model's float32 weights plus Adam moments (~1.1 TB) do
    not fit in one 8-accelerator host.
    """
    c = base.get_config()
    with c.unlocked():
        c.model = model_config(preset, dtype="bfloat16", param_dtype="float32", remat=remat)
    c.run.name = preset
    c.train.seq_len = seq_len
    c.train.global_batch_size = global_batch_size
    c.train.steps = train_tokens // (seq_len * global_batch_size)
    c.optim.lr = lr
    # A tenth of the peak, rounded so that it prints as written (3e-05, not 2.9999999999999997e-05).
    c.optim.min_lr = float(f"{lr / 10:.12g}") if min_lr is None else min_lr
    c.optim.schedule = "cosine"
    c.optim.warmup_steps = warmup_steps
    c.data.kind = "datatrove"
    c.checkpoint.every = 1000
    if fsdp_across_hosts:
        c.mesh.dcn_data = 1
        c.mesh.dcn_fsdp = -1
    return c


def debug_config(preset: str) -> ConfigDict:
    """`base.py` with a tiny debug preset: float32, synthetic tokens, a hundred steps."""
    c = base.get_config()
    with c.unlocked():
        c.model = model_config(preset)
    c.run.name = preset
    return c
