"""AdamW with warmup + cosine/linear/sqrt/constant decay, gradient clipping and a decay mask.

Schedule (step s counted from 0, W warmup steps, S stable steps, T = decay horizon, lr / min_lr
/ warmup_init = i / warmup_offset = o from config):
  s < W:            i + (lr - i) * (s + o) / W      (o=1: never exactly i; o=0: Megatron, MaxText)
  W <= s < T:       min_lr + (lr - min_lr) * f(p),  p = clip((s - W - S) / (T - W - S), 0, 1),
                    f = cosine: (1 + cos(pi p)) / 2, linear: 1 - p, sqrt: 1 - sqrt(p), constant: 1
                    (so the rate holds at lr for S steps: warmup-stable-decay)
  s >= T:           min_lr (constant schedule: lr); 0 with after_decay="zero" (MaxText)
The defaults (i=0, o=1, S=0) give lr * (s + 1) / W, then decay from W to T.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from ml_collections import ConfigDict


def learning_rate_schedule(optim: ConfigDict, total_steps: int) -> optax.Schedule:
    """The learning rate as a function of the (0-based) optimizer step."""
    lr, min_lr = float(optim.lr), float(optim.min_lr)
    warmup = int(optim.warmup_steps)
    horizon = int(optim.decay_steps or total_steps)
    kind = optim.schedule
    # Configs written before these keys existed read as jaxtrain's original schedule.
    init = float(optim.get("warmup_init", 0.0))
    offset = int(optim.get("warmup_offset", 1))
    decay_start = warmup + int(optim.get("stable_steps", 0))
    zero_after = optim.get("after_decay", "min_lr") == "zero"

    def schedule(step: jax.Array) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        warm = init + (lr - init) * (step + offset) / max(warmup, 1)
        progress = jnp.clip((step - decay_start) / max(horizon - decay_start, 1), 0.0, 1.0)
        if kind == "cosine":
            decayed = min_lr + (lr - min_lr) * 0.5 * (1 + jnp.cos(jnp.pi * progress))
        elif kind == "linear":
            decayed = min_lr + (lr - min_lr) * (1 - progress)
        elif kind == "sqrt":
            decayed = min_lr + (lr - min_lr) * (1 - jnp.sqrt(progress))
        else:
            decayed = jnp.full_like(progress, lr)
        if zero_after and kind != "constant":
            decayed = jnp.where(step >= horizon, 0.0, decayed)
        return jnp.where(step < warmup, warm, decayed)

    return schedule


def weight_decay_mask(params: Any) -> Any:
    """True for matrices and embeddings; norms' scales and biases are not decayed."""

    def decays(path: tuple, _: Any) -> bool:
        name = str(getattr(path[-1], "key", path[-1]))
        return name not in ("scale", "bias")

    return jax.tree_util.tree_map_with_path(decays, params)


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformation:
    """Scales the updates by min(1, max_norm / global norm): optax's `clip_by_global_norm`,
    with the same (empty) state, written as one scalar factor.

    optax divides every gradient by the norm inside a select; XLA treats the division as too
    costly to repeat in each consumer, so it wrote the clipped gradients out once more, a full
    extra pass over every parameter's gradient, before Adam's two moment updates read them.
    A multiplication by a scalar is fused into both.
    """

    def update_fn(updates, state, params=None):
        del params
        norm = optax.tree.norm(updates)
        factor = jnp.where(norm < max_norm, 1.0, max_norm / norm)
        return jax.tree.map(lambda g: g * factor.astype(g.dtype), updates), state

    return optax.GradientTransformation(optax.init_empty_state, update_fn)


def make_optimizer(optim: ConfigDict, total_steps: int) -> optax.GradientTransformation:
    """Clip by global norm, then AdamW on the schedule above."""
    adamw = optax.adamw(
        learning_rate_schedule(optim, total_steps),
        b1=optim.b1,
        b2=optim.b2,
        eps=optim.eps,
        weight_decay=optim.weight_decay,
        mask=weight_decay_mask,
    )
    if optim.clip_grad_norm > 0:
        return optax.chain(clip_by_global_norm(optim.clip_grad_norm), adamw)
    return adamw
