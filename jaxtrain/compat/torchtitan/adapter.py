"""TorchTitan job configs (native TOML, or a Primus `framework: torchtitan` module) -> jaxtrain.

TorchTitan (v0.2.2) runs LambdaLR with, at 0-based step s, T = training.steps, W warmup steps,
D = round(T x decay_ratio) decay steps (T - W without a ratio) and m = min_lr_factor:
  s < W:  (s + 1) / W
  else:   m + (1 - m) * f(clip((s - (T - D)) / D, 0, 1)),  f = linear 1-p | sqrt 1-sqrt(p) | cosine
which is jaxtrain's schedule with warmup_offset=1, stable_steps = T - D - W, decay_steps = T and
min_lr = m x lr. Model flavours are torchtitan_models'.
"""

from __future__ import annotations

import os
from typing import Any

from jaxtrain.compat.common import fp8, known, pipeline_keys
from jaxtrain.compat.common.report import KeyReport
from jaxtrain.compat.common.target import has_key
from jaxtrain.compat.torchtitan import model as torchtitan_models

# JobConfig defaults of the keys read here, used when a file leaves them out.
DEFAULTS: dict[str, Any] = {
    "optimizer.name": "AdamW",
    "optimizer.lr": 8e-4,
    "optimizer.eps": 1e-8,
    "optimizer.beta1": 0.9,
    "optimizer.beta2": 0.95,
    "optimizer.weight_decay": 0.1,
    "lr_scheduler.warmup_steps": 200,
    "lr_scheduler.decay_ratio": None,
    "lr_scheduler.decay_type": "linear",
    "lr_scheduler.min_lr_factor": 0.0,
    "training.local_batch_size": 8,
    "training.global_batch_size": -1,
    "training.seq_len": 2048,
    "training.max_norm": 1.0,
    "training.steps": 10000,
    "training.dataset": "c4_test",
    "training.mixed_precision_param": "bfloat16",
    "parallelism.data_parallel_replicate_degree": 1,
    "parallelism.data_parallel_shard_degree": -1,
    "parallelism.tensor_parallel_degree": 1,
    "parallelism.context_parallel_degree": 1,
    "parallelism.pipeline_parallel_degree": 1,
    "checkpoint.enable": False,
    "checkpoint.folder": "checkpoint",
    "checkpoint.interval": 500,
    "checkpoint.keep_latest_k": 10,
    "activation_checkpoint.mode": "selective",
    "validation.enable": False,
    "metrics.log_freq": 10,
    "job.dump_folder": "./outputs",
}
_COMM = "communication/sharding detail of torch.distributed; the numbers are the same"
IGNORE_RULES: tuple[tuple[str, str], ...] = (
    ("job.description", "free text"),
    ("job.print_config", "printing"),
    ("job.save_config_file", "printing"),
    ("job.config_file", "the file itself"),
    ("job.custom_config_module", "TorchTitan extension hook"),
    ("profiling.*", "profiling"),
    (
        "metrics.*",
        "metric sinks; jaxtrain writes metrics.jsonl and TensorBoard when tensorboardX is present",
    ),
    ("comm.*", _COMM),
    ("memory_estimation.*", "tooling"),
    ("fault_tolerance.*", "tooling"),
    ("experimental.*", "TorchTitan extension hooks"),
    ("compile.*", "XLA compiles every step"),
    (
        "primus_turbo.*",
        "Primus GPU kernel switches (its float8 linear and grouped GEMMs "
        "are kernels for the same fp8 numbers)",
    ),
    ("mx.*", "used only with mx"),
    ("optimizer.implementation", "kernel choice"),
    ("optimizer.early_step_in_backward", "memory choice"),
    ("training.gc_*", "Python garbage collection"),
    ("training.dataloader.*", "data loader"),
    ("training.mixed_precision_reduce", "gradients are reduced in float32"),
    ("parallelism.fsdp_reshard_after_forward", _COMM),
    ("parallelism.disable_loss_parallel", _COMM),
    ("parallelism.enable_async_tensor_parallel", _COMM),
    ("parallelism.context_parallel_*", _COMM),
    ("parallelism.expert_*", "MoE detail (a dense model)"),
    ("checkpoint.last_save_*", "checkpoint format"),
    ("checkpoint.export_dtype", "format"),
    ("checkpoint.async_mode", "checkpoint writer"),
    ("checkpoint.enable_*", "checkpoint detail"),
    ("checkpoint.initial_load_model_only", "used only with initial_load_path"),
    ("checkpoint.initial_load_in_hf*", "used only with initial_load_path"),
    ("checkpoint.exclude_from_loading", "resume detail"),
    ("activation_checkpoint.*", "activation recomputation detail (memory only)"),
    ("debug.deterministic*", "cuDNN determinism switch"),
    ("debug.moe_force_load_balance", "MoE benchmarking switch"),
    ("model.print_after_conversion", "printing"),
    ("validation.dataloader.*", "data loader"),
    ("trainable", "Primus runtime"),
    ("*sink_level", "logging"),
)


def _get(r: KeyReport, key: str) -> Any:
    return r.get(key, DEFAULTS.get(key))


def to_jaxtrain(r: KeyReport, primus: bool = False) -> dict[str, Any]:
    """Settings for a TorchTitan job config; fills the report (defaults included)."""
    for key, value in DEFAULTS.items():
        if not r.has(key):
            r.values[key], r.origins[key] = value, "torchtitan default"
    s: dict[str, Any] = {}
    seq_len = int(_get(r, "training.seq_len"))
    s.update(torchtitan_models.model_settings(r, seq_len))
    _model_extras(r, s)
    _training(r, s)
    _schedule(r, s)
    _parallel(r, s)
    _checkpoint_and_run(r, s, primus)
    r.finish(IGNORE_RULES, ("torchtitan default",) + getattr(r, "default_origins", ()))
    return s


def _model_extras(r: KeyReport, s: dict[str, Any]) -> None:
    for key in ("model.hf_assets_path", "model.tokenizer_path"):
        if r.has(key):
            folder = known.local_tokenizer_folder(r.get(key))
            if folder:
                s["data.tokenizer"] = folder
                r.mapped(key, "data.tokenizer")
            else:
                r.ignored(
                    key,
                    "not a local tokenizer folder; the architecture comes from model.name/flavor",
                )
    converters = list(r.get("model.converters") or [])
    experts = bool(s.get("model.num_experts"))
    rest = fp8.map_torchtitan(r, s, converters, experts)
    if r.has("model.converters") and not r.handled("model.converters"):
        r.ignored("model.converters", f"{rest}: kernel swaps only (e.g. primus_turbo)")
    mode = _get(r, "activation_checkpoint.mode")
    s["model.remat"] = {"none": "none", "full": "full"}.get(mode, "dots")
    r.mapped("activation_checkpoint.mode", "model.remat", "memory/speed only")
    s["model.dtype"] = str(_get(r, "training.mixed_precision_param"))
    r.mapped(
        "training.mixed_precision_param",
        "model.dtype",
        "compute dtype of FSDP mixed precision; parameters stay float32",
    )
    if r.has("training.dtype"):
        s["model.param_dtype"] = str(r.get("training.dtype"))
        r.mapped("training.dtype", "model.param_dtype")


def _training(r: KeyReport, s: dict[str, Any]) -> None:
    s["train.steps"] = int(_get(r, "training.steps"))
    s["train.seq_len"] = int(_get(r, "training.seq_len"))
    s["optim.clip_grad_norm"] = float(_get(r, "training.max_norm"))
    s["train.log_every"] = int(_get(r, "metrics.log_freq"))
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
        r.unsupported(
            "training.dataset",
            "Hugging Face datasets are not read; tokenize the "
            "text into datatrove shards (tools/tokenize_corpus.py) and set "
            "--config.data.paths",
            target="data.paths",
        )
        if r.get("training.dataset_path"):
            r.unsupported("training.dataset_path", "see training.dataset", target="data.paths")
    if r.get("training.enable_cpu_offload"):
        r.unsupported("training.enable_cpu_offload", "host offload is not implemented")
    name = _get(r, "optimizer.name")
    wd = float(_get(r, "optimizer.weight_decay"))
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
        s[target] = float(_get(r, key))
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
    if s.get("data.kind") != "synthetic":
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
    warmup = min(int(_get(r, "lr_scheduler.warmup_steps")), total)
    ratio = _get(r, "lr_scheduler.decay_ratio")
    decay = total - warmup if ratio is None else min(round(total * float(ratio)), total - warmup)
    factor = r.get("lr_scheduler.min_lr_factor", r.get("lr_scheduler.lr_min", 0.0))
    kind = _get(r, "lr_scheduler.decay_type")
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
    rep = int(_get(r, "parallelism.data_parallel_replicate_degree"))
    shard = int(_get(r, "parallelism.data_parallel_shard_degree"))
    tp = int(_get(r, "parallelism.tensor_parallel_degree"))
    cp = int(_get(r, "parallelism.context_parallel_degree"))
    pp = int(_get(r, "parallelism.pipeline_parallel_degree"))
    if shard < 0:
        if world % (rep * tp * cp * pp):
            raise r.devices_not_divisible(
                {"replicate": rep, "tensor": tp, "context": cp, "pipeline": pp}
            )
        shard = world // (rep * tp * cp * pp)
    batch_degree = rep * shard
    local = int(_get(r, "training.local_batch_size"))
    glob = int(_get(r, "training.global_batch_size"))
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
    pipeline_keys.torchtitan(r, s, pp, local, batch_degree)
    r.note(f"assumed {world} devices; data parallel degree {batch_degree}")


def _checkpoint_and_run(r: KeyReport, s: dict[str, Any], primus: bool) -> None:
    dump = str(_get(r, "job.dump_folder"))
    if primus:
        r.ignored("job.dump_folder", "Primus sets the output folder from workspace/exp_name")
    else:
        s["run.dir"] = dump
        r.mapped("job.dump_folder", "run.dir")
    enabled = bool(r.get("checkpoint.enable"))
    interval = int(_get(r, "checkpoint.interval"))
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
        s["checkpoint.dir"] = os.path.join(dump, str(_get(r, "checkpoint.folder")))
        r.mapped("checkpoint.folder", "checkpoint.dir")
    elif r.has("checkpoint.folder"):
        r.ignored(
            "checkpoint.folder",
            "checkpointing is disabled"
            if not enabled
            else "Primus places checkpoints under the experiment folder",
        )
    keep = int(_get(r, "checkpoint.keep_latest_k") or 0)
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
