"""TorchTitan job configs (native TOML, or a Primus `framework: torchtitan` module) -> jaxtrain.

Model flavours are `model`'s; `fp8` reads the float8 converters, `training` (with `pipeline`)
the rest. Here are TorchTitan's defaults of the keys read, filled in for those a file leaves
out, the model extras (tokenizer, precision, recomputation) and the keys with no meaning for
jaxtrain.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common import known
from jaxtrain.compat.common.report import KeyReport
from jaxtrain.compat.torchtitan import fp8, model, training

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
# Sections of a TorchTitan job config other than [model].
_SECTIONS = ("job", "training", "lr_scheduler", "parallelism", "activation_checkpoint")
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


def is_job_config(doc: dict[str, Any]) -> bool:
    """Whether a TOML document is a TorchTitan job config: a [model] table with a `flavor`, or
    one beside another of TorchTitan's sections."""
    return (
        "model" in doc
        and isinstance(doc["model"], dict)
        and ("flavor" in doc["model"] or any(s in doc for s in _SECTIONS))
    )


def to_jaxtrain(r: KeyReport, primus: bool = False) -> dict[str, Any]:
    """Settings for a TorchTitan job config; fills the report (defaults included)."""
    for key, value in DEFAULTS.items():
        if not r.has(key):
            r.values[key], r.origins[key] = value, "torchtitan default"
    s: dict[str, Any] = {}
    seq_len = int(r.get("training.seq_len"))
    s.update(model.model_settings(r, seq_len))
    _model_extras(r, s)
    training.map_training(r, s, primus)
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
    rest = fp8.map_fp8(r, s, converters, experts)
    if r.has("model.converters") and not r.handled("model.converters"):
        r.ignored("model.converters", f"{rest}: kernel swaps only (e.g. primus_turbo)")
    mode = r.get("activation_checkpoint.mode")
    s["model.remat"] = {"none": "none", "full": "full"}.get(mode, "dots")
    r.mapped("activation_checkpoint.mode", "model.remat", "memory/speed only")
    s["model.dtype"] = str(r.get("training.mixed_precision_param"))
    r.mapped(
        "training.mixed_precision_param",
        "model.dtype",
        "compute dtype of FSDP mixed precision; parameters stay float32",
    )
    if r.has("training.dtype"):
        s["model.param_dtype"] = str(r.get("training.dtype"))
        r.mapped("training.dtype", "model.param_dtype")
