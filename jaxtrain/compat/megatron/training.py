"""Megatron-LM training, schedule, parallelism, data and checkpoint arguments -> jaxtrain.

Megatron's learning rate at (0-based) iteration s, from megatron/core/optimizer_param_scheduler:
  s <= W:  init + (lr - init) * s / W          (W = lr_warmup_iters, init = lr_warmup_init)
  s > D:   min_lr                              (D = lr_decay_iters, default train_iters)
  else:    min_lr + (lr - min_lr) * f((s - W) / (D - W)), f = cosine / linear / 1 (constant);
           WSD: f = 1 until D - lr_wsd_decay_iters, then g over those iters
which is jaxtrain's schedule with optim.warmup_offset=0, warmup_init=init, decay_steps=D and,
for WSD, stable_steps = D - lr_wsd_decay_iters - W.
"""

from __future__ import annotations

import math
from typing import Any

from jaxtrain.compat.common.report import KeyReport, is_off
from jaxtrain.compat.common.target import has_key
from jaxtrain.compat.megatron.pipeline import map_pipeline
from jaxtrain.config import loader as config_lib
from jaxtrain.errors import ConfigError

SCHEDULE_STYLES = {"cosine": "cosine", "linear": "linear", "constant": "constant", "WSD": ""}
WSD_STYLES = {"linear": "linear", "cosine": "cosine", "minus_sqrt": "sqrt"}
_DATA_KEYS = (
    "data_path",
    "train_data_path",
    "valid_data_path",
    "test_data_path",
    "split",
    "data_args_path",
    "per_split_data_args_path",
    "data_cache_path",
)


def _int(r: KeyReport, key: str, default: int) -> int:
    value = r.get(key)
    return default if value is None else int(value)


def map_training(r: KeyReport, s: dict[str, Any], tp: int) -> None:
    """Batch, schedule, optimizer, parallelism, data, evaluation and checkpoint keys."""
    _batch(r, s, tp)
    _schedule(r, s)
    _optimizer(r, s)
    _data(r, s)
    _evaluation(r, s)
    _checkpoint(r, s)


def _batch(r: KeyReport, s: dict[str, Any], tp: int) -> None:
    steps = r.get("train_iters")
    if steps is None:
        raise ConfigError(
            f"{r.source}: train_iters is null; jaxtrain needs the run length in "
            "iterations (sample-based train_samples is not supported)."
        )
    s["train.steps"] = int(steps)
    r.mapped("train_iters", "train.steps")
    pp, cp = _int(r, "pipeline_model_parallel_size", 1), _int(r, "context_parallel_size", 1)
    ep = _int(r, "expert_model_parallel_size", 1)
    world = r.world_size
    # Megatron's expert groups span pipeline x expert x expert-tensor ranks (expert-tensor
    # defaults to tensor): the world must hold whole ones as well as whole model replicas.
    etp = _int(r, "expert_tensor_parallel_size", tp) if r.get("num_experts") else 1
    experts = {"pipeline": pp, "expert": ep, "expert tensor": etp}
    groups = [{"tensor": tp, "pipeline": pp, "context": cp}]
    if r.get("num_experts") and ep * etp > 1:
        groups.append(experts)
    if any(world % math.prod(g.values()) for g in groups):
        raise r.devices_not_divisible(*groups)
    dp = world // (tp * pp * cp)
    micro = _int(r, "micro_batch_size", 1)
    s["train.global_batch_size"] = int(r.get("global_batch_size"))
    s["train.micro_batch_size"] = micro * dp
    r.mapped("global_batch_size", "train.global_batch_size")
    r.mapped(
        "micro_batch_size",
        "train.micro_batch_size",
        f"per data-parallel rank: {micro} x {dp} ranks (= {world} devices / (tp {tp} x pp "
        f"{pp} x cp {cp})) = {micro * dp} sequences per forward pass",
    )
    s["train.seq_len"] = int(r.get("seq_length"))
    r.mapped("seq_length", "train.seq_len")
    if r.has("batch_size") and not is_off(r.get("batch_size")):
        r.unsupported(
            "batch_size", "deprecated alias of micro_batch_size; set micro_batch_size instead"
        )
    s["mesh.ici_tensor"], s["mesh.ici_context"] = tp, cp
    s["mesh.ici_fsdp"] = -1
    r.mapped("tensor_model_parallel_size", "mesh.ici_tensor")
    if r.has("context_parallel_size"):
        r.mapped("context_parallel_size", "mesh.ici_context")
    if r.get("num_experts"):
        s["mesh.ici_expert"] = ep
        if r.has("expert_model_parallel_size"):
            r.mapped("expert_model_parallel_size", "mesh.ici_expert")
    elif r.has("expert_model_parallel_size"):
        r.ignored("expert_model_parallel_size", "dense model: no experts to place")
    map_pipeline(r, s, pp, micro, dp)
    r.note(
        f"data parallel ranks ({dp}) -> mesh.ici_fsdp=-1 (jaxtrain shards parameters, "
        "gradients and optimizer state over them; the update equals Megatron's DDP / "
        "distributed optimizer)"
    )
    for key in (
        "use_distributed_optimizer",
        "use_torch_fsdp2",
        "use_megatron_fsdp",
        "use_custom_fsdp",
        "data_parallel_sharding_strategy",
        "data_parallel_replicate_degree",
        "sequence_parallel",
    ):
        if r.has(key):
            r.ignored(
                key,
                "how data/sequence parallel state is sharded; jaxtrain's "
                "logical-axis rules decide, the numbers are the same",
            )
    if r.has("seed"):
        s["run.seed"] = int(r.get("seed"))
        r.mapped("seed", "run.seed", "jaxtrain draws its own random numbers from it")
    if r.has("log_interval"):
        s["train.log_every"] = int(r.get("log_interval"))
        r.mapped("log_interval", "train.log_every")


def _schedule(r: KeyReport, s: dict[str, Any]) -> None:
    steps = s["train.steps"]
    style = r.get("lr_decay_style", "linear")
    if style not in SCHEDULE_STYLES:
        r.unsupported(
            "lr_decay_style",
            f"{style!r} has no jaxtrain schedule (cosine, linear, constant and WSD map exactly)",
        )
        style = "cosine"
    decay = r.get("lr_decay_iters") or steps
    warmup = r.get("lr_warmup_iters") or 0
    if r.get("lr_warmup_fraction") is not None:
        warmup = int(float(r.get("lr_warmup_fraction")) * decay)
        r.mapped(
            "lr_warmup_fraction",
            "optim.warmup_steps",
            f"{warmup} = fraction x {decay} decay iterations",
        )
        if r.has("lr_warmup_iters"):
            r.ignored("lr_warmup_iters", "lr_warmup_fraction is set and wins")
    elif r.has("lr_warmup_iters"):
        r.mapped("lr_warmup_iters", "optim.warmup_steps")
    s.update(
        {
            "optim.lr": float(r.get("lr")),
            "optim.min_lr": float(r.get("min_lr") or 0.0),
            "optim.warmup_steps": int(warmup),
            "optim.decay_steps": int(decay),
            "optim.warmup_offset": 0,
            "optim.warmup_init": float(r.get("lr_warmup_init") or 0.0),
            "optim.stable_steps": 0,
            "optim.schedule": SCHEDULE_STYLES[style] or "linear",
        }
    )
    r.mapped("lr", "optim.lr")
    for key, target in (
        ("min_lr", "optim.min_lr"),
        ("lr_warmup_init", "optim.warmup_init"),
        ("lr_decay_iters", "optim.decay_steps"),
        ("lr_decay_style", "optim.schedule, optim.warmup_offset"),
    ):
        if r.has(key) and not r.handled(key):
            r.mapped(
                key,
                target,
                "null: train_iters" if key == "lr_decay_iters" and r.get(key) is None else "",
            )
    if style == "WSD":
        wsd = int(r.get("lr_wsd_decay_iters") or 0)
        if not wsd:
            r.unsupported(
                "lr_wsd_decay_iters",
                "WSD needs lr_wsd_decay_iters (sample-based lr_wsd_decay_samples is not supported)",
            )
        wsd_style = r.get("lr_wsd_decay_style", "exponential")
        if wsd_style not in WSD_STYLES:
            r.unsupported(
                "lr_wsd_decay_style",
                f"{wsd_style!r} decay has no jaxtrain shape "
                "(linear, cosine, minus_sqrt map exactly)",
            )
        s["optim.schedule"] = WSD_STYLES.get(wsd_style, "linear")
        s["optim.stable_steps"] = max(int(decay) - wsd - int(warmup), 0)
        for key in ("lr_wsd_decay_iters", "lr_wsd_decay_style"):
            if r.has(key) and not r.handled(key):
                r.mapped(key, "optim.stable_steps, optim.schedule")
    else:
        for key in ("lr_wsd_decay_iters", "lr_wsd_decay_style"):
            if r.has(key):
                r.ignored(key, f"used only with lr_decay_style WSD (here {style})")


def _optimizer(r: KeyReport, s: dict[str, Any]) -> None:
    for key, target, default in (
        ("weight_decay", "optim.weight_decay", 0.01),
        ("adam_beta1", "optim.b1", 0.9),
        ("adam_beta2", "optim.b2", 0.999),
        ("adam_eps", "optim.eps", 1e-8),
        ("clip_grad", "optim.clip_grad_norm", 1.0),
    ):
        s[target] = float(r.get(key, default))
        if r.has(key):
            r.mapped(
                key,
                target,
                "not applied to biases and norm scales, as in Megatron"
                if key == "weight_decay"
                else "",
            )
    if r.get("optimizer", "adam") != "adam":
        return
    for key in r.values:
        if key.startswith("muon_") or key == "sgd_momentum":
            r.ignored(key, "belongs to another optimizer (optimizer is adam)")


def _join(value: Any) -> str:
    """A Megatron path argument (a list of words, or one string) as data.paths text."""
    return " ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def _data(r: KeyReport, s: dict[str, Any]) -> None:
    documents = {
        "eod_mask_loss": "data.eod_mask_loss",
        "reset_attention_mask": "data.reset_attention_mask",
        "reset_position_ids": "data.reset_position_ids",
    }
    if r.get("mock_data"):
        s["data.kind"] = "synthetic"
        r.mapped("mock_data", "data.kind", "synthetic tokens")
        for key in _DATA_KEYS:
            if r.has(key):
                r.ignored(key, "mock_data=true: no files are read")
        for key in documents:
            if r.has(key):
                r.ignored(key, "synthetic tokens hold no documents (no end-of-document tokens)")
        return
    if r.has("mock_data"):
        r.ignored("mock_data", "false: real data named by data_path / train_data_path")
    given = [k for k in _DATA_KEYS if r.has(k) and not is_off(r.get(k)) and k != "split"]
    readable = "megatron" in config_lib.DATA_KINDS and has_key("data.split")
    unread = [
        k for k in given if k in ("data_args_path", "per_split_data_args_path", "data_cache_path")
    ]
    if not readable or not given or unread:
        reason = (
            (
                "Megatron .bin/.idx indexed datasets cannot be read yet (data.kind has no "
                "'megatron'); tokenize the corpus into datatrove shards (tools/tokenize_corpus.py) "
                "and set --config.data.paths"
            )
            if not readable
            else (
                "data description files are not read; list the prefixes in data_path"
                if unread
                else "no data: mock_data is false and no data path is set"
            )
        )
        for key in unread or given or ["data_path"]:
            r.unsupported(key, reason, target="data.paths")
        return
    s["data.kind"] = "megatron"
    if r.get("train_data_path"):
        s["data.paths"] = _join(r.get("train_data_path"))
        r.mapped(
            "train_data_path", "data.kind, data.paths", "Megatron prefixes (blend weights kept)"
        )
        if r.get("valid_data_path"):
            s["data.val_paths"] = _join(r.get("valid_data_path"))
            r.mapped("valid_data_path", "data.val_paths")
        if r.get("data_path"):
            r.ignored("data_path", "train_data_path is set and wins, as in Megatron")
        if r.has("split"):
            r.ignored("split", "separate train/valid paths: no split")
    else:
        s["data.paths"] = _join(r.get("data_path"))
        r.mapped("data_path", "data.kind, data.paths", "Megatron prefixes (blend weights kept)")
        split = r.get("split")
        # Megatron's own default when data_path is given without a split.
        s["data.split"] = "969,30,1" if is_off(split) else str(split).replace(" ", "")
        r.mapped(
            "split", "data.split", "null: Megatron's default 969,30,1" if is_off(split) else ""
        )
    if r.get("test_data_path"):
        r.ignored("test_data_path", "test sets are not read during training")
    for key, target in documents.items():
        if r.has(key) and has_key(target):
            s[target] = bool(r.get(key))
            r.mapped(key, target)
        elif r.get(key):
            r.unsupported(key, "document-boundary handling is not available here")


def _evaluation(r: KeyReport, s: dict[str, Any]) -> None:
    iters = r.get("eval_iters") or 0
    interval = r.get("eval_interval") or 0
    # eval_iters 0: Megatron validates neither periodically nor after training.
    s["train.eval_batches"] = (
        int(iters) if iters or r.has("eval_iters") else s.get("train.eval_batches", 8)
    )
    s["train.eval_every"] = int(interval) if iters else 0
    if r.has("eval_iters"):
        r.mapped(
            "eval_iters",
            "train.eval_batches, train.eval_every",
            "0: no validation at all"
            if not iters
            else "validation batches of global_batch_size sequences",
        )
    if r.has("eval_interval") and iters:
        r.mapped("eval_interval", "train.eval_every")
    elif r.has("eval_interval"):
        r.ignored("eval_interval", "eval_iters=0: no validation")


def _checkpoint(r: KeyReport, s: dict[str, Any]) -> None:
    save, load = r.get("save"), r.get("load")
    finetune = bool(r.get("finetune"))
    if save:
        s["checkpoint.dir"] = str(save)
        s["checkpoint.every"] = int(r.get("save_interval") or 0)
        r.mapped("save", "checkpoint.dir")
        if r.has("save_interval"):
            r.mapped("save_interval", "checkpoint.every")
    else:
        s["checkpoint.every"] = 0
        if r.has("save"):
            r.mapped(
                "save",
                "checkpoint.every",
                "null: Megatron writes no checkpoints; "
                "jaxtrain still writes one at the end (in <run dir>/checkpoints)",
            )
        if r.has("save_interval"):
            r.ignored("save_interval", "save is null: no checkpoints")
    if load and finetune and has_key("checkpoint.init_from"):
        # Megatron's finetune loads weights only and restarts at iteration 0 with a fresh
        # optimizer; the run's own checkpoints (checkpoint.dir) still resume it later.
        s["checkpoint.init_from"] = str(load)
        r.mapped(
            "load",
            "checkpoint.init_from",
            "must hold Hugging Face or jaxtrain weights: "
            "Megatron's own checkpoint format is not read",
        )
        r.mapped("finetune", "checkpoint.init_from", "weights only, step 0, fresh optimizer")
    elif load:
        if finetune:
            r.unsupported(
                "finetune", "loading weights without optimizer state and step is not implemented"
            )
        if save and str(load) != str(save):
            r.unsupported(
                "load",
                "jaxtrain resumes from and saves to one folder "
                "(checkpoint.dir); load differs from save",
                target="checkpoint.dir",
            )
        elif not save:
            s["checkpoint.dir"] = str(load)
            r.mapped("load", "checkpoint.dir, checkpoint.resume")
        else:
            r.mapped(
                "load",
                "checkpoint.resume",
                "jaxtrain resumes its own (Orbax) checkpoints in that folder",
            )
    else:
        if r.has("load"):
            r.mapped(
                "load",
                "checkpoint.resume",
                "null: Megatron would start over (writing "
                "over its checkpoints in save); jaxtrain resumes the run's own, as for "
                "every config (--config.checkpoint.resume=false starts over)",
            )
        if r.has("finetune"):
            r.ignored("finetune", "load is null: nothing is loaded")
    if r.get("no_load_optim") and load and not finetune:
        r.unsupported(
            "no_load_optim", "resuming the step without the optimizer state is not implemented"
        )
    elif r.has("no_load_optim"):
        r.ignored(
            "no_load_optim",
            "unset"
            if is_off(r.get("no_load_optim"))
            else "nothing is loaded with its optimizer state here",
        )
    step = r.get("ckpt_step")
    if step is not None and load and not finetune:
        s["checkpoint.resume_step"] = int(step)
        r.mapped(
            "ckpt_step",
            "checkpoint.resume_step",
            "the checkpoint of that step; refused while later ones exist",
        )
    elif step is not None:
        r.ignored("ckpt_step", "nothing is resumed from load here")
    if r.has("auto_continue_train"):
        r.mapped(
            "auto_continue_train",
            "checkpoint.resume",
            "true: resume from the latest checkpoint in save, as jaxtrain does"
            if r.get("auto_continue_train")
            else "false: Primus would not continue on relaunch; jaxtrain resumes the run's "
            "own checkpoints, as for every config (--config.checkpoint.resume=false "
            "starts over)",
        )
    # Megatron deletes no checkpoint, unless save_retain_interval keeps only its multiples
    # (and the latest).
    retain = r.get("save_retain_interval")
    s["checkpoint.keep"], s["checkpoint.keep_every"] = (1, int(retain)) if retain else (0, 0)
    if retain:
        r.mapped(
            "save_retain_interval",
            "checkpoint.keep, checkpoint.keep_every",
            "the latest checkpoint and those at multiples of it",
        )
    else:
        r.note("Megatron deletes no checkpoint: checkpoint.keep=0 keeps every one")
    if r.has("disable_last_saving"):
        r.ignored("disable_last_saving", "jaxtrain always writes a checkpoint at the end")
