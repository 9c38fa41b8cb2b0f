"""prime-rl's training keys of a pretraining TOML -> jaxtrain: data, optimizer and schedule,
parallelism, checkpoints and the run folder.

As Prime Intellect's hosted-pretraining documentation describes them: every shard of the
`[data] paths` folders forms one token pool read in `seq_len` windows in a new order each epoch
(jaxtrain's datatrove reader); `optim.lr` defaults to 1e-3 with a 10-step linear warmup.
Schedules are those of prime-rl's trainer (torch LinearLR warmup from max(min_lr, 1e-8 x lr),
so step 0 runs at that floor: warmup_offset=0; cosine over max_steps - warmup; linear decay
over the last decay_steps, reaching min_lr on the last step). Checkpoint keys are those of
prime-rl's trainer at PRIME_RL_COMMIT (and the older `ckpt.resume_step`): a rerun resumes (from
the latest checkpoint, or the step the file names) unless the file starts over
(`clean = true`), and no checkpoint prime-rl would keep is deleted.
"""

from __future__ import annotations

import math
from typing import Any

from jaxtrain.compat.common.report import KeyReport
from jaxtrain.errors import ConfigError

# The prime-rl commit the checkpoint keys were checked against (tests/fixtures/compat/SOURCES.md).
PRIME_RL_COMMIT = "559b447"
PRETRAIN_LR = 1e-3
PRETRAIN_WARMUP = 10


def map_training(r: KeyReport, s: dict[str, Any], doc: dict[str, Any]) -> None:
    """Data, optimizer, schedule, parallelism, checkpoint and run-folder keys."""
    _data(r, s)
    _optim(r, s, doc)
    _parallel(r, s)
    _checkpoint(r, s, doc)
    _run_dir(r, s)


def _paths(r: KeyReport, key: str) -> str:
    value = r.get(key)
    items = [value] if isinstance(value, str) else list(value or [])
    if not items or not all(isinstance(p, str) and p for p in items):
        raise ConfigError(
            f"{r.source}: {key} must be a folder or a list of folders, got {value!r}."
        )
    return ",".join(items)


def _data(r: KeyReport, s: dict[str, Any]) -> None:
    if r.get("data.type") == "fake":
        s["data.kind"] = "synthetic"
        r.mapped("data.type", "data.kind")
    else:
        s["data.kind"], s["data.paths"] = "datatrove", _paths(r, "data.paths")
        r.mapped(
            "data.paths",
            "data.kind, data.paths",
            "datatrove shard folders: one token "
            "pool read in seq_len windows, reshuffled each epoch",
        )
    seq = int(r.get("data.seq_len", 128))
    batch, micro = int(r.get("data.batch_size", 128)), int(r.get("data.micro_batch_size", 1))
    world = r.world_size
    s.update(
        {
            "train.seq_len": seq,
            "train.global_batch_size": batch,
            "train.micro_batch_size": micro * world,
        }
    )
    r.mapped("data.seq_len", "train.seq_len")
    r.mapped("data.batch_size", "train.global_batch_size")
    r.mapped(
        "data.micro_batch_size",
        "train.micro_batch_size",
        f"per GPU: {micro} x {world} GPUs = {micro * world} sequences per pass",
    )
    if r.has("val.data.paths") or r.has("val.interval"):
        interval = int(r.get("val.interval", 50))
        s["train.eval_every"] = interval
        r.mapped("val.interval", "train.eval_every")
        if r.has("val.data.paths"):
            s["data.val_paths"] = _paths(r, "val.data.paths")
            r.mapped("val.data.paths", "data.val_paths")
        samples = r.get("val.num_samples", r.get("val.eval_iters"))
        if r.has("val.eval_iters"):
            s["train.eval_batches"] = int(r.get("val.eval_iters"))
            r.mapped("val.eval_iters", "train.eval_batches")
        elif samples is not None:
            s["train.eval_batches"] = max(1, math.ceil(int(samples) / batch))
            r.mapped(
                "val.num_samples",
                "train.eval_batches",
                f"ceil({samples} / batch {batch}) batches of {batch} sequences",
            )
        val_seq = r.get("val.data.seq_len")
        if val_seq is not None and int(val_seq) != seq:
            r.unsupported("val.data.seq_len", f"validation windows use train.seq_len ({seq})")
        elif r.has("val.data.seq_len"):
            r.mapped("val.data.seq_len", "train.seq_len")
    else:
        s["train.eval_every"], s["train.eval_batches"] = 0, 0
        r.note("no [val]: no validation at all (train.eval_every=0, train.eval_batches=0)")


def _optim(r: KeyReport, s: dict[str, Any], doc: dict[str, Any]) -> None:
    kind = r.get("optim.type", "adamw")
    if kind != "adamw":
        r.unsupported("optim.type", f"{kind!r}: only AdamW exists")
    lr = float(r.get("optim.lr", PRETRAIN_LR))
    s.update(
        {
            "optim.lr": lr,
            "optim.weight_decay": float(r.get("optim.weight_decay", 0.01)),
            "optim.b1": float(r.get("optim.betas1", 0.9)),
            "optim.b2": float(r.get("optim.betas2", 0.999)),
            "optim.eps": 1e-8,
        }
    )
    clip = r.get("optim.max_norm", 1.0)
    s["optim.clip_grad_norm"] = float(clip) if clip is not None else 0.0
    for key, target in (
        ("optim.lr", "optim.lr"),
        ("optim.weight_decay", "optim.weight_decay"),
        ("optim.betas1", "optim.b1"),
        ("optim.betas2", "optim.b2"),
        ("optim.max_norm", "optim.clip_grad_norm"),
        ("optim.type", "(AdamW)"),
    ):
        if r.has(key) and not r.handled(key):
            r.mapped(key, target)
    steps = s["train.steps"]
    sched = doc.get("scheduler")
    if sched is None:  # the pretrain default: 10 warmup steps, then the constant rate
        kind, warmup, min_lr, decay = "linear", PRETRAIN_WARMUP, 0.0, 0
        r.note(
            f"no [scheduler]: prime-rl's pretrain default, a {PRETRAIN_WARMUP}-step linear "
            "warmup then a constant rate"
        )
    else:
        kind = r.get("scheduler.type", "constant")
        warmup = int(r.get("scheduler.warmup_steps", 10)) if kind != "constant" else 0
        min_lr = float(r.get("scheduler.min_lr", 0.0))
        decay = int(r.get("scheduler.decay_steps", 10)) if kind == "linear" else 0
    floor = min_lr if min_lr > 0 else 1e-8 * lr
    s.update(
        {
            "optim.warmup_steps": warmup,
            "optim.warmup_offset": 0,
            "optim.warmup_init": floor,
            "optim.min_lr": min_lr,
            "optim.stable_steps": 0,
            "optim.decay_steps": steps,
            "optim.schedule": "constant",
        }
    )
    if kind == "cosine":
        s["optim.schedule"] = "cosine"
    elif kind == "linear" and decay > 0:
        # torch LinearLR over decay_steps - 1 iterations from max_steps - decay_steps.
        # Its end factor is also max(min_lr / lr, 1e-8): the last step runs at that floor.
        s.update(
            {
                "optim.schedule": "linear",
                "optim.decay_steps": steps - 1,
                "optim.stable_steps": max(steps - decay - warmup, 0),
                "optim.min_lr": floor,
            }
        )
    elif kind not in ("linear", "constant"):
        r.unsupported("scheduler.type", f"{kind!r} is not a prime-rl schedule jaxtrain maps")
    for key in r.under("scheduler"):
        if not r.handled(key):
            r.mapped(
                key,
                "optim.schedule, optim.warmup_*, optim.stable_steps, "
                "optim.decay_steps, optim.min_lr",
            )


def _parallel(r: KeyReport, s: dict[str, Any]) -> None:
    for key, target in (("model.cp", "mesh.ici_context"), ("model.dp_replicate", "mesh.ici_data")):
        if r.has(key):
            s[target] = int(r.get(key))
            r.mapped(key, target)
    if r.has("model.ep"):
        r.ignored("model.ep", "dense model: no experts to place")
    if r.has("model.tp") and int(r.get("model.tp")) != 1:
        s["mesh.ici_tensor"] = int(r.get("model.tp"))
        r.mapped("model.tp", "mesh.ici_tensor")
    if r.has("model.ac"):
        s["model.remat"] = "full"
        r.mapped("model.ac", "model.remat", "memory/speed only")
    for key in ("deployment.num_train_gpus", "deployment.num_train_nodes"):
        if r.has(key):
            r.mapped(
                key, "train.micro_batch_size", "devices the per-GPU micro batch is multiplied by"
            )


def _default(r: KeyReport, key: str, value: Any, target: str, reason: str) -> None:
    """Reports a key the file leaves out whose prime-rl default decides a jaxtrain setting."""
    r.origins[key] = "prime-rl default"
    r.mapped(key, target, f"not set: {reason}", value=value)


def _checkpoint(r: KeyReport, s: dict[str, Any], doc: dict[str, Any]) -> None:
    if "ckpt" in doc:
        s["checkpoint.every"] = int(r.get("ckpt.interval") or 0)
        if r.has("ckpt.interval"):
            r.mapped("ckpt.interval", "checkpoint.every")
        else:
            _default(
                r,
                "ckpt.interval",
                None,
                "checkpoint.every",
                "prime-rl's default None saves only at the end of training",
            )
        if r.get("ckpt.output_dir"):
            s["checkpoint.dir"] = str(r.get("ckpt.output_dir"))
            r.mapped("ckpt.output_dir", "checkpoint.dir")
    else:
        s["checkpoint.every"] = 0
        r.note("no [ckpt]: prime-rl saves nothing; jaxtrain still writes a final checkpoint")
    _retention(r, s)
    for key in r.under("ckpt.weights") + ["ckpt.weights", "ckpt.skip_gather_master_weights"]:
        if r.has(key):
            r.ignored(
                key,
                f"Hugging Face weights beside each checkpoint: prime-rl "
                f"{PRIME_RL_COMMIT} writes none (its trainer saves only "
                "checkpoints), and neither does jaxtrain; `python -m jaxtrain "
                "export --run RUN --to hf OUT` writes them from any checkpoint",
            )
    if r.has("ckpt.weights_only"):
        r.ignored(
            "ckpt.weights_only",
            "jaxtrain's checkpoints always hold the optimizer state too, so they resume",
        )
    if r.has("ckpt.save_async"):
        r.mapped(
            "ckpt.save_async",
            "(asynchronous save)",
            "jaxtrain always saves "
            "asynchronously: training goes on while a checkpoint is written, and the run "
            "waits for it to be complete before it exits"
            + (
                ""
                if r.get("ckpt.save_async")
                else "; false would only pause training during the save, the checkpoint is the same"
            ),
        )
    for key in r.under("ckpt"):
        if key.startswith("ckpt.skip_") and key not in ("ckpt.skip_gather_master_weights",):
            if r.get(key):
                r.unsupported(
                    key,
                    "resuming without part of the saved state (progress, "
                    "scheduler, data position or optimizer) is not implemented",
                )
            else:
                r.ignored(key, "false: the whole state is restored, as jaxtrain does")
    _resume(r, s, doc)


def _retention(r: KeyReport, s: dict[str, Any]) -> None:
    """ckpt.keep_last (None keeps every checkpoint) and keep_interval (kept for good)."""
    keep = r.get("ckpt.keep_last")
    s["checkpoint.keep"] = int(keep) if keep else 0
    if r.has("ckpt.keep_last"):
        r.mapped(
            "ckpt.keep_last",
            "checkpoint.keep",
            "" if keep else "None: keep every checkpoint (checkpoint.keep=0)",
        )
    else:
        _default(
            r,
            "ckpt.keep_last",
            None,
            "checkpoint.keep",
            "prime-rl's default None keeps every checkpoint (checkpoint.keep=0)",
        )
    if r.get("ckpt.keep_interval"):
        s["checkpoint.keep_every"] = int(r.get("ckpt.keep_interval"))
        r.mapped(
            "ckpt.keep_interval",
            "checkpoint.keep_every",
            "checkpoints at multiples of it are kept for good",
        )


def _resume(r: KeyReport, s: dict[str, Any], doc: dict[str, Any]) -> None:
    """Which checkpoint a rerun starts from. jaxtrain resumes the run's latest checkpoint
    unless asked otherwise; prime-rl's keys only choose the step, or start over (clean)."""
    steps: dict[str, int] = {}
    if r.get("ckpt.resume_step") is not None:  # older prime-rl: -1 latest, N that step
        steps["ckpt.resume_step"] = int(r.get("ckpt.resume_step"))
    if isinstance(doc.get("resume"), dict) and r.get("resume.step") is not None:
        steps["resume.step"] = int(r.get("resume.step"))
    if len(set(steps.values())) > 1:
        raise ConfigError(
            f"{r.source}: ckpt.resume_step={steps['ckpt.resume_step']} and "
            f"[resume] step={steps['resume.step']} name different steps; keep "
            "one."
        )
    for key, step in steps.items():
        if step < -1:
            raise ConfigError(
                f"{r.source}: {key}={step}: -1 (the latest checkpoint) or a step number."
            )
        s["checkpoint.resume_step"] = step
        r.mapped(
            key,
            "checkpoint.resume_step",
            "-1: the latest checkpoint"
            if step == -1
            else f"the checkpoint of step {step}; refused while later ones exist",
        )
    if "resume" in doc and not (r.has("resume.step") or r.has("resume.dir")):
        r.mapped("resume", "checkpoint.resume", "the latest checkpoint", value=doc["resume"])
    if r.has("resume.dir"):
        r.unsupported(
            "resume.dir",
            "another run's prime-rl checkpoint is not read; jaxtrain "
            "resumes its own checkpoints (checkpoint.init_from starts from another "
            "run's weights only)",
            target="checkpoint.init_from",
        )
    asked = bool(steps) or "resume" in doc
    if r.get("clean") and not asked:
        s["checkpoint.resume"] = False
        r.mapped(
            "clean",
            "checkpoint.resume",
            "true: start over; jaxtrain deletes nothing, so "
            "a checkpoint folder that already holds checkpoints is refused (move it away)",
        )
    elif r.has("clean"):
        r.ignored(
            "clean",
            "resuming: prime-rl cleans nothing then"
            if r.get("clean")
            else "false: nothing is deleted, as jaxtrain never does",
        )
    if not asked and not r.get("clean"):
        _default(
            r,
            "resume",
            None,
            "checkpoint.resume",
            "no [resume], ckpt.resume_step or clean; prime-rl would start over (refusing "
            "a run directory that holds a previous run's checkpoints), jaxtrain resumes "
            "the run's latest complete checkpoint, as for every config "
            "(--config.checkpoint.resume=false starts over)",
        )


def _run_dir(r: KeyReport, s: dict[str, Any]) -> None:
    if r.get("output_dir") or r.get("run.name"):
        name = str(r.get("run.name") or "prime-rl")
        s["run.name"] = name
        if r.has("run.name"):
            r.mapped("run.name", "run.name")
        if r.get("output_dir"):
            s["run.dir"] = f"{r.get('output_dir')}/{name}"
            r.mapped("output_dir", "run.dir", "<output_dir>/<run.name>")
