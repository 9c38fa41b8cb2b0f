"""MaxText's training keys -> jaxtrain: run length, learning-rate schedule, optimizer, batch,
mesh (with the pipeline keys of `pipeline`), data (`data`), evaluation and checkpoints.

MaxText's schedule at 0-based step s, with L = learning_rate_schedule_steps (-1: steps) and
W = int(L x warmup_steps_fraction): optax.linear_schedule(0, lr, W) (lr * s / W), then the
decay to lr x final fraction, then 0 from L on. The decay depends on the MaxText version the
config comes from:

- `learning_rate_final_fraction` (MaxText since January 2026): cosine with p = (s - W) /
  (L - W - 1), reaching the final rate at step L - 1; or WSD: lr until L - W - D, then linear or
  cosine over D = int(L x wsd_decay_steps_fraction) steps, reaching it at L - 1 too. jaxtrain's
  schedule with decay_steps = L - 1 (and stable_steps for WSD) is the same rate at every step
  before L; past L (when steps > L) MaxText's rate is 0, jaxtrain's stays at the final rate.
- `cosine_learning_rate_final_fraction` (earlier MaxText): cosine with p = (s - W) / (L - W),
  reaching the final rate at L: decay_steps = L and after_decay = "zero", exact everywhere.

The global batch is per_device_batch_size x devices x gradient_accumulation_steps.
"""

from __future__ import annotations

import math
import os
from typing import Any

from jaxtrain.compat.common import known
from jaxtrain.compat.common.report import KeyReport, is_off
from jaxtrain.compat.maxtext.data import map_data
from jaxtrain.compat.maxtext.pipeline import map_pipeline

# jaxtrain mesh axis <- MaxText axis names (several MaxText axes may fold into one).
AXES = {
    "data": ("data",),
    "pipeline": ("pipeline",),
    "fsdp": ("fsdp",),
    "context": ("sequence", "context"),
    "expert": ("expert",),
    "tensor": ("tensor",),
}
NO_AXIS = (
    "diloco",
    "fsdp_transpose",
    "context_usp_ulysses",
    "context_autoregressive",
    "tensor_sequence",
    "autoregressive",
)


def map_training(r: KeyReport, s: dict[str, Any]) -> None:
    """Schedule, optimizer, batch, mesh, pipeline, data, evaluation and checkpoint keys."""
    _schedule_and_batch(r, s)
    _mesh(r, s)
    map_pipeline(r, s)
    _data_eval_checkpoint(r, s)


def _filled(r: KeyReport, side: str) -> dict[str, int]:
    """The side's MaxText axis sizes, a -1 on an axis jaxtrain lacks filled as MaxText fills it
    (devices per host for ici, hosts for dcn, over the product of the other sizes); a -1 on
    a jaxtrain axis stays -1, which jaxtrain fills the same way."""
    names = [n for group in AXES.values() for n in group] + list(NO_AXIS)
    sizes = {
        n: int(r.get(f"{side}_{n}_parallelism")) for n in names if r.has(f"{side}_{n}_parallelism")
    }
    unknown = [n for n in NO_AXIS if sizes.get(n) == -1]
    hosts = max(r.num_hosts, 1)
    target = max(r.world_size // hosts, 1) if side == "ici" else hosts
    others = math.prod(v for v in sizes.values() if v != -1)
    if len(unknown) == 1 and list(sizes.values()).count(-1) == 1 and target % others == 0:
        sizes[unknown[0]] = target // others
        r.note(
            f"{side}_{unknown[0]}_parallelism=-1 filled as MaxText fills it: {target} "
            f"{'devices per host' if side == 'ici' else 'hosts'} / {others} = "
            f"{target // others}"
        )
    return sizes


def _mesh(r: KeyReport, s: dict[str, Any]) -> None:
    for side in ("ici", "dcn"):
        sizes = _filled(r, side)
        for axis, names in AXES.items():
            size, keys = 1, []
            for name in names:
                if name in sizes:
                    keys.append(f"{side}_{name}_parallelism")
                    value = sizes[name]
                    size = value if size == 1 else (size * value if value != -1 else -1)
            s[f"mesh.{side}_{axis}"] = size
            for key in keys:
                r.mapped(key, f"mesh.{side}_{axis}")
        for name in NO_AXIS:
            key = f"{side}_{name}_parallelism"
            if name in sizes and sizes[name] != 1:
                r.unsupported(key, f"MaxText's {name!r} mesh axis has no jaxtrain counterpart")
            elif name in sizes:
                r.ignored(
                    key, "-1, filled to 1: axis unused" if r.get(key) == -1 else "1: axis unused"
                )
    if r.has("num_slices"):
        r.ignored("num_slices", "slices are processes; dcn_* sizes decide")


def _schedule_and_batch(r: KeyReport, s: dict[str, Any]) -> None:
    steps = int(r.get("steps"))
    horizon = int(r.get("learning_rate_schedule_steps"))
    horizon = steps if horizon == -1 else horizon
    steps = horizon if steps == -1 else steps
    lr = float(r.get("learning_rate"))
    warmup = int(horizon * float(r.get("warmup_steps_fraction")))
    final_key = "learning_rate_final_fraction"
    old = "cosine_learning_rate_final_fraction"
    if r.has(old) and (
        not r.has(final_key)
        or r.origins.get(final_key, "").startswith(tuple(getattr(r, "default_origins", ())))
    ):
        final_key = old
    final = float(r.get(final_key, 0.1))
    s.update(
        {
            "train.steps": steps,
            "optim.lr": lr,
            "optim.min_lr": lr * final,
            "optim.warmup_steps": warmup,
            "optim.warmup_offset": 0,
            "optim.warmup_init": 0.0,
        }
    )
    r.mapped("steps", "train.steps")
    r.mapped("learning_rate", "optim.lr")
    r.mapped("warmup_steps_fraction", "optim.warmup_steps", f"int({horizon} x fraction) = {warmup}")
    # The key tells the MaxText version: learning_rate_final_fraction came with the decay that
    # ends a step earlier (January 2026).
    if final_key == "learning_rate_final_fraction":
        _decay_to_last_step(r, s, steps, horizon, warmup)
    else:
        s.update(
            {
                "optim.decay_steps": horizon,
                "optim.stable_steps": 0,
                "optim.schedule": "cosine",
                "optim.after_decay": "zero",
            }
        )
        r.mapped(
            "learning_rate_schedule_steps",
            "optim.decay_steps, optim.after_decay",
            f"{horizon}: MaxText before learning_rate_final_fraction reaches the final "
            "rate at this step, 0 after it",
        )
        if r.get("lr_schedule_type", "cosine") != "cosine":
            r.unsupported(
                "lr_schedule_type",
                f"{r.get('lr_schedule_type')!r}: only the cosine "
                "schedule of MaxText before learning_rate_final_fraction is mapped",
            )
    for key in ("learning_rate_final_fraction", old):
        if r.has(key) and key == final_key:
            r.mapped(key, "optim.min_lr", f"min_lr = lr x {final}")
        elif r.has(key):
            r.ignored(key, f"{final_key} is used (the other MaxText spelling)")
    if r.has("lr_schedule_type") and not r.handled("lr_schedule_type"):
        r.mapped("lr_schedule_type", "optim.schedule")
    if r.get("opt_type") == "adam_pax":
        # Pax's Adam folds the bias correction into its decay rates: with adam_eps_root 0 its
        # update is AdamW's.
        r.mapped("opt_type", "optim.*", "Pax's Adam: AdamW with its bias correction folded in")
    for key, target in (
        ("adam_b1", "optim.b1"),
        ("adam_b2", "optim.b2"),
        ("adam_eps", "optim.eps"),
        ("adam_weight_decay", "optim.weight_decay"),
        ("gradient_clipping_threshold", "optim.clip_grad_norm"),
        ("z_loss_multiplier", "train.z_loss"),
    ):
        s[target] = float(r.get(key))
        r.mapped(
            key,
            target,
            "MaxText (adamw_mask empty) also decays norm scales; jaxtrain does not"
            if key == "adam_weight_decay" and not r.get("adamw_mask")
            else "",
        )
    devices, gas = r.world_size, int(r.get("gradient_accumulation_steps", 1))
    micro = int(float(r.get("per_device_batch_size")) * devices)
    s["train.micro_batch_size"], s["train.global_batch_size"] = micro, micro * gas
    s["train.seq_len"] = int(r.get("max_target_length"))
    r.mapped(
        "per_device_batch_size",
        "train.micro_batch_size, train.global_batch_size",
        f"x {devices} devices x {gas} accumulation steps",
    )
    r.mapped("gradient_accumulation_steps", "train.global_batch_size")
    r.mapped("max_target_length", "train.seq_len, model.max_seq_len")
    s["run.seed"] = int(r.get("init_weights_seed", 0))
    r.mapped("init_weights_seed", "run.seed")
    tiles = int(r.get("num_vocab_tiling", 1))
    if tiles > 1 and s["train.seq_len"] % tiles == 0:
        # MaxText tiles the batch x sequence tokens, jaxtrain each sequence: the same number
        # of chunks of the same size.
        s["train.loss_chunks"] = tiles
        r.mapped("num_vocab_tiling", "train.loss_chunks")
    elif tiles > 1:
        r.unsupported(
            "num_vocab_tiling",
            f"{tiles} tiles: jaxtrain chunks each sequence, so "
            f"the count must divide max_target_length={s['train.seq_len']}",
        )
    elif r.has("num_vocab_tiling"):
        r.ignored("num_vocab_tiling", "1: the logits are computed at once")
    if r.has("vocab_tiling_ag_once"):
        r.ignored("vocab_tiling_ag_once", "when the output kernel is gathered (XLA decides)")


def _decay_to_last_step(
    r: KeyReport, s: dict[str, Any], steps: int, horizon: int, warmup: int
) -> None:
    """The decay of MaxText since learning_rate_final_fraction: the final rate at L - 1."""
    kind = str(r.get("lr_schedule_type", "cosine"))
    stable, style = 0, "cosine"
    if kind == "wsd":
        decay = int(horizon * float(r.get("wsd_decay_steps_fraction", 0.1)))
        stable, style = horizon - warmup - decay, str(r.get("wsd_decay_style", "linear"))
        if decay < 2 or stable < 0 or style not in ("linear", "cosine"):
            r.unsupported(
                "lr_schedule_type",
                f"WSD with {decay} decay steps, {stable} stable "
                f"steps and {style!r} decay has no jaxtrain counterpart",
            )
        r.mapped(
            "lr_schedule_type",
            "optim.schedule, optim.stable_steps",
            f"WSD: {stable} steps at lr, then {style} over {decay} steps",
        )
        for key in ("wsd_decay_steps_fraction", "wsd_decay_style"):
            if r.has(key):
                r.mapped(key, "optim.stable_steps, optim.schedule")
    elif kind != "cosine":
        r.unsupported("lr_schedule_type", f"{kind!r} is neither cosine nor wsd")
    else:
        for key in ("wsd_decay_steps_fraction", "wsd_decay_style"):
            if r.has(key):
                r.ignored(key, "used only with lr_schedule_type wsd")
    s.update(
        {
            "optim.decay_steps": max(horizon - 1, warmup + stable),
            "optim.stable_steps": max(stable, 0),
            "optim.schedule": style,
            "optim.after_decay": "min_lr",
        }
    )
    why = f"{horizon}: the final rate is reached at step {horizon - 1} (optim.decay_steps = L - 1)"
    if steps > horizon:
        r.unsupported(
            "learning_rate_schedule_steps",
            f"{why}; MaxText trains steps {horizon}-"
            f"{steps - 1} at rate 0, jaxtrain's schedule has no zero phase after its "
            "final rate: set train.steps to it, or optim.decay_steps/after_decay",
            target="optim.decay_steps",
        )
    else:
        r.mapped("learning_rate_schedule_steps", "optim.decay_steps", why)


def _data_eval_checkpoint(r: KeyReport, s: dict[str, Any]) -> None:
    map_data(r, s)
    kind = r.get("dataset_type")
    for key in ("dataset_path", "dataset_name", "eval_dataset_name", "train_split", "eval_split"):
        if r.has(key) and not r.handled(key):
            r.ignored(key, f"dataset_type={kind}: this source is not read")
    interval, steps = int(r.get("eval_interval", -1)), int(r.get("eval_steps", -1))
    s["train.eval_every"] = interval if interval > 0 else 0
    if interval <= 0:  # MaxText evaluates nothing, so no final validation either
        s["train.eval_batches"] = 0
    r.mapped(
        "eval_interval",
        "train.eval_every, train.eval_batches",
        "" if interval > 0 else f"{interval}: no validation at all",
    )
    if interval > 0 and steps > 0:
        s["train.eval_batches"] = steps
        r.mapped("eval_steps", "train.eval_batches")
    elif r.has("eval_steps"):
        r.ignored("eval_steps", "no validation" if interval <= 0 else "-1: jaxtrain's default")
    # The MLPerf GPT-3 file's eval batch and target loss (its stopping rule) need validation.
    for key in ("eval_per_device_batch_size", "target_eval_loss"):
        if interval <= 0 and r.has(key):
            r.ignored(key, "no validation (eval_interval <= 0)")
    enabled = bool(r.get("enable_checkpointing"))
    s["checkpoint.every"] = int(r.get("checkpoint_period")) if enabled else 0
    # A rerun resumes the run's own checkpoints, as MaxText does when enabled; disabled,
    # MaxText loads nothing, but jaxtrain's final checkpoint is then the run's own.
    r.mapped(
        "enable_checkpointing",
        "checkpoint.every, checkpoint.resume",
        "true: saves every "
        "checkpoint_period; a rerun resumes the run's latest checkpoint, as jaxtrain does"
        if enabled
        else "false: MaxText neither saves nor resumes; jaxtrain still writes "
        "one checkpoint at the end, and a rerun resumes from it as for every config "
        "(--config.checkpoint.resume=false starts over)",
    )
    if enabled:
        r.mapped("checkpoint_period", "checkpoint.every")
    keep = r.get("max_num_checkpoints_to_keep")
    s["checkpoint.keep"] = 0 if is_off(keep) else int(keep)
    if r.has("max_num_checkpoints_to_keep"):
        r.mapped(
            "max_num_checkpoints_to_keep",
            "checkpoint.keep",
            "None: keep all (checkpoint.keep=0)" if is_off(keep) else "",
        )
    for key, what in (
        ("load_parameters_path", "parameters"),
        ("load_full_state_path", "full training state"),
    ):
        if not is_off(r.get(key)):
            r.unsupported(
                key,
                f"MaxText's {what} checkpoint (read when the run has none of its "
                "own) is not read; checkpoint.init_from starts from Hugging Face "
                "or jaxtrain weights instead",
                target="checkpoint.init_from",
            )
        elif r.has(key):
            r.ignored(key, "unset: nothing loaded besides the run's own checkpoints")
    name, out = r.get("run_name"), r.get("base_output_directory")
    if name:
        s["run.name"] = str(name)
        r.mapped("run_name", "run.name")
        if out:
            s["run.dir"] = os.path.join(str(out), str(name))
            r.mapped("base_output_directory", "run.dir", "<base_output_directory>/<run_name>")
    folder = known.local_tokenizer_folder(r.get("tokenizer_path"))
    if folder:
        s["data.tokenizer"] = folder
        r.mapped("tokenizer_path", "data.tokenizer")
    elif r.has("tokenizer_path") and not r.handled("tokenizer_path"):
        r.ignored("tokenizer_path", "not a local tokenizer folder; only sampling needs it")
