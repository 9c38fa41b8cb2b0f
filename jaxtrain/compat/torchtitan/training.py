"""TorchTitan's training keys -> jaxtrain: run length, data, optimizer, validation, the
learning-rate schedule, batch and mesh (with the pipeline keys of `pipeline`), checkpoints and
the run folder. A local `training.dataset_path` is raw text (`data.kind="text"`). The adapter has filled TorchTitan's defaults (`adapter.DEFAULTS`) into the
report first, so a key a file leaves out reads as TorchTitan's default.

TorchTitan (v0.2.2) runs LambdaLR with, at 0-based step s, T = training.steps, W warmup steps,
D = round(T x decay_ratio) decay steps (T - W without a ratio) and m = min_lr_factor:
  s < W:  (s + 1) / W
  else:   m + (1 - m) * f(clip((s - (T - D)) / D, 0, 1)),  f = linear 1-p | sqrt 1-sqrt(p) | cosine
which is jaxtrain's schedule with warmup_offset=1, stable_steps = T - D - W, decay_steps = T and
min_lr = m x lr.
"""

from __future__ import annotations

import os
from typing import Any

from jaxtrain.compat.common.report import KeyReport
from jaxtrain.compat.common.target import has_key
from jaxtrain.compat.torchtitan.pipeline import map_pipeline


def map_training(r: KeyReport, s: dict[str, Any], primus: bool) -> None:
    """Training, validation, schedule, parallelism and checkpoint keys; `primus` when the file is
    a Primus module (Primus places the output and checkpoint folders)."""
    _training(r, s)
    _schedule(r, s)
    _parallel(r, s)
    _checkpoint_and_run(r, s, primus)


def _training(r: KeyReport, s: dict[str, Any]) -> None:
    s["train.steps"] = int(r.get("training.steps"))
    s["train.seq_len"] = int(r.get("training.seq_len"))
    s["optim.clip_grad_norm"] = float(r.get("training.max_norm"))
    s["train.log_every"] = int(r.get("metrics.log_freq"))
    for key, target in (
        ("training.steps", "train.steps"),
        ("training.seq_len", "train.seq_len"),
        ("training.max_norm", "optim.clip_grad_norm"),
        ("metrics.log_freq", "train.log_every"),
    ):
        r.mapped(key, target)
    mock = r.get("training.mock_data")
    if mock:
        s["data.kind"] = "synthetic"
        r.mapped("training.mock_data", "data.kind", "synthetic tokens")
        for key in ("training.dataset", "training.dataset_path"):
            if r.has(key):
                r.ignored(key, "mock_data=true: no dataset is read")
    else:
        if r.has("training.mock_data"):
            r.ignored("training.mock_data", "false: training.dataset is read")
        _dataset(r, s, "training", "data.paths")
    if r.get("training.enable_cpu_offload"):
        r.unsupported("training.enable_cpu_offload", "host offload is not implemented")
    name = r.get("optimizer.name")
    wd = float(r.get("optimizer.weight_decay"))
    if name == "AdamW" or (name == "Adam" and wd == 0):
        r.mapped("optimizer.name", "(AdamW)")
    else:
        r.unsupported(
            "optimizer.name",
            f"{name} (with weight decay as an L2 term) is not implemented; only AdamW",
        )
    for key, target in (
        ("optimizer.lr", "optim.lr"),
        ("optimizer.eps", "optim.eps"),
        ("optimizer.beta1", "optim.b1"),
        ("optimizer.beta2", "optim.b2"),
        ("optimizer.weight_decay", "optim.weight_decay"),
    ):
        s[target] = float(r.get(key))
        r.mapped(
            key,
            target,
            "TorchTitan also decays norm scales; jaxtrain does not"
            if key == "optimizer.weight_decay"
            else "",
        )
    if r.has("debug.seed") and r.get("debug.seed") is not None:
        s["run.seed"] = int(r.get("debug.seed"))
        r.mapped("debug.seed", "run.seed")
    _validation(r, s)


def _dataset(r: KeyReport, s: dict[str, Any], section: str, target: str) -> None:
    """`<section>.dataset` / `dataset_path`: local files are raw text (`data.kind="text"`, the
    "text" field, as TorchTitan's C4 loaders read it); Hub datasets are refused."""
    name, path = r.get(f"{section}.dataset"), r.get(f"{section}.dataset_path")
    if path and os.path.exists(str(path)):
        s["data.kind"], s[target], s["data.text_key"] = "text", str(path), "text"
        r.mapped(f"{section}.dataset_path", f"data.kind, {target}", "raw text, field 'text'")
        r.mapped(f"{section}.dataset", "(read from dataset_path)", f"{name}: its local files")
        return
    r.unsupported(
        f"{section}.dataset",
        f"{name!r}: Hugging Face datasets are not read from the Hub; set {section}.dataset_path to "
        f"a local folder of its JSONL/Parquet files (or --config.{target})",
        target=target,
    )
    if path:
        r.unsupported(f"{section}.dataset_path", f"{path!r} does not exist", target=target)


def _validation(r: KeyReport, s: dict[str, Any]) -> None:
    if not r.get("validation.enable"):
        s["train.eval_every"], s["train.eval_batches"] = 0, 0  # not even a final one
        r.mapped(
            "validation.enable",
            "train.eval_every, train.eval_batches",
            "false: no validation at all",
        )
        for key in r.under("validation"):
            if not r.handled(key):
                r.ignored(key, "validation is disabled")
        return
    s["train.eval_every"] = int(r.get("validation.freq", 10))
    r.mapped("validation.enable", "train.eval_every")
    r.mapped("validation.freq", "train.eval_every", "TorchTitan also validates after step 1")
    steps = int(r.get("validation.steps", -1))
    if steps < 0:
        r.unsupported(
            "validation.steps",
            "-1 (the whole validation set) has no fixed batch count; set validation.steps",
            target="train.eval_batches",
        )
    else:
        s["train.eval_batches"] = steps
        r.mapped("validation.steps", "train.eval_batches", "batches of the global batch size")
    if int(r.get("validation.seq_len", s["train.seq_len"])) != s["train.seq_len"]:
        r.unsupported("validation.seq_len", "validation uses train.seq_len")
    if s.get("data.kind") == "text":
        _dataset(r, s, "validation", "data.val_paths")
    elif s.get("data.kind") != "synthetic":
        r.unsupported(
            "validation.dataset",
            "Hugging Face datasets are not read; set --config.data.val_paths",
            target="data.val_paths",
        )
    for key in ("validation.dataset", "validation.dataset_path"):
        if r.has(key) and not r.handled(key):
            r.ignored(key, "mock data: validation reads synthetic tokens too")
    if r.has("validation.local_batch_size"):
        r.ignored(
            "validation.local_batch_size",
            "validation batches hold "
            "train.global_batch_size sequences (the count scales accordingly)",
        )


def _schedule(r: KeyReport, s: dict[str, Any]) -> None:
    total = int(r.get("lr_scheduler.total_steps") or s["train.steps"])
    warmup = min(int(r.get("lr_scheduler.warmup_steps")), total)
    ratio = r.get("lr_scheduler.decay_ratio")
    decay = total - warmup if ratio is None else min(round(total * float(ratio)), total - warmup)
    factor = r.get("lr_scheduler.min_lr_factor", r.get("lr_scheduler.lr_min", 0.0))
    kind = r.get("lr_scheduler.decay_type")
    if kind not in ("linear", "cosine", "sqrt"):
        r.unsupported("lr_scheduler.decay_type", f"{kind!r} is not linear, cosine or sqrt")
        kind = "linear"
    s.update(
        {
            "optim.warmup_steps": warmup,
            "optim.warmup_offset": 1,
            "optim.warmup_init": 0.0,
            "optim.stable_steps": total - decay - warmup,
            "optim.decay_steps": total,
            "optim.min_lr": s["optim.lr"] * float(factor or 0.0),
            "optim.schedule": kind,
        }
    )
    for key, target in (
        ("lr_scheduler.warmup_steps", "optim.warmup_steps"),
        ("lr_scheduler.decay_ratio", "optim.stable_steps"),
        ("lr_scheduler.decay_type", "optim.schedule"),
        ("lr_scheduler.min_lr_factor", "optim.min_lr"),
        ("lr_scheduler.lr_min", "optim.min_lr"),
        ("lr_scheduler.total_steps", "optim.decay_steps"),
    ):
        if r.has(key) and not r.handled(key):
            r.mapped(key, target)


def _parallel(r: KeyReport, s: dict[str, Any]) -> None:
    world = r.world_size
    rep = int(r.get("parallelism.data_parallel_replicate_degree"))
    shard = int(r.get("parallelism.data_parallel_shard_degree"))
    tp = int(r.get("parallelism.tensor_parallel_degree"))
    cp = int(r.get("parallelism.context_parallel_degree"))
    pp = int(r.get("parallelism.pipeline_parallel_degree"))
    if shard < 0:
        if world % (rep * tp * cp * pp):
            raise r.devices_not_divisible(
                {"replicate": rep, "tensor": tp, "context": cp, "pipeline": pp}
            )
        shard = world // (rep * tp * cp * pp)
    batch_degree = rep * shard
    local = int(r.get("training.local_batch_size"))
    glob = int(r.get("training.global_batch_size"))
    s["train.micro_batch_size"] = local * batch_degree
    s["train.global_batch_size"] = glob if glob > 0 else local * batch_degree
    r.mapped(
        "training.local_batch_size",
        "train.micro_batch_size",
        f"per data-parallel rank: {local} x {batch_degree} ranks",
    )
    r.mapped(
        "training.global_batch_size",
        "train.global_batch_size",
        "-1: local_batch_size x data-parallel degree" if glob <= 0 else "",
    )
    s.update(
        {"mesh.ici_data": rep, "mesh.ici_fsdp": -1, "mesh.ici_tensor": tp, "mesh.ici_context": cp}
    )
    for key, target in (
        ("parallelism.data_parallel_replicate_degree", "mesh.ici_data"),
        ("parallelism.data_parallel_shard_degree", "mesh.ici_fsdp"),
        ("parallelism.tensor_parallel_degree", "mesh.ici_tensor"),
        ("parallelism.context_parallel_degree", "mesh.ici_context"),
    ):
        r.mapped(key, target)
    map_pipeline(r, s, pp, local, batch_degree)
    r.note(f"assumed {world} devices; data parallel degree {batch_degree}")


def _checkpoint_and_run(r: KeyReport, s: dict[str, Any], primus: bool) -> None:
    dump = str(r.get("job.dump_folder"))
    if primus:
        r.ignored("job.dump_folder", "Primus sets the output folder from workspace/exp_name")
    else:
        s["run.dir"] = dump
        r.mapped("job.dump_folder", "run.dir")
    enabled = bool(r.get("checkpoint.enable"))
    interval = int(r.get("checkpoint.interval"))
    s["checkpoint.every"] = interval if enabled else 0
    # A rerun resumes the run's own checkpoints, as TorchTitan does when enabled; disabled,
    # TorchTitan loads nothing, but jaxtrain's final checkpoint is then the run's own.
    r.mapped(
        "checkpoint.enable",
        "checkpoint.every, checkpoint.resume",
        "true: saves every interval; a rerun loads the latest checkpoint, as jaxtrain resumes"
        if enabled
        else "false: TorchTitan neither saves nor loads; jaxtrain still writes one "
        "checkpoint at the end, and a rerun resumes from it as for every config "
        "(--config.checkpoint.resume=false starts over)",
    )
    if enabled:
        r.mapped("checkpoint.interval", "checkpoint.every")
    else:
        r.ignored("checkpoint.interval", "checkpointing is disabled")
    if enabled and not primus:
        s["checkpoint.dir"] = os.path.join(dump, str(r.get("checkpoint.folder")))
        r.mapped("checkpoint.folder", "checkpoint.dir")
    elif r.has("checkpoint.folder"):
        r.ignored(
            "checkpoint.folder",
            "checkpointing is disabled"
            if not enabled
            else "Primus places checkpoints under the experiment folder",
        )
    keep = int(r.get("checkpoint.keep_latest_k") or 0)
    s["checkpoint.keep"] = keep
    r.mapped("checkpoint.keep_latest_k", "checkpoint.keep", "" if keep else "0: keep all")
    initial = r.get("checkpoint.initial_load_path")
    if initial and r.get("checkpoint.initial_load_in_hf") and has_key("checkpoint.init_from"):
        s["checkpoint.init_from"] = str(initial)
        r.mapped(
            "checkpoint.initial_load_path",
            "checkpoint.init_from",
            "Hugging Face weights, read when the run has no checkpoint of its own",
        )
    elif initial:
        r.unsupported(
            "checkpoint.initial_load_path",
            "only Hugging Face weights "
            "(initial_load_in_hf = true) can start a run; TorchTitan's DCP format is "
            "not read",
            target="checkpoint.init_from",
        )
    step = r.get("checkpoint.load_step")
    if r.has("checkpoint.load_step") and not enabled:
        r.ignored("checkpoint.load_step", "checkpointing is disabled: TorchTitan loads nothing")
    elif step is not None and int(step) != -1:
        s["checkpoint.resume_step"] = int(step)
        r.mapped(
            "checkpoint.load_step",
            "checkpoint.resume_step",
            "the checkpoint of that step; refused while later ones exist, or where there is none",
        )
    elif r.has("checkpoint.load_step"):
        r.mapped("checkpoint.load_step", "checkpoint.resume_step", "-1: the latest checkpoint")
