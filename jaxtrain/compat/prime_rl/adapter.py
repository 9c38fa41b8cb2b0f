"""prime-rl pretraining TOMLs (`mode = "pretrain"`) -> jaxtrain settings.

Semantics follow Prime Intellect's hosted-pretraining documentation: of the model only its
config and tokenizer are read (`[model] name`, a Hugging Face model); `[eval]`, `[inference]`
and `[weight_broadcast]` are rejected; `training` reads the rest. Here too: how a TOML is told
to be prime-rl's, and the devices its `[deployment]` names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jaxtrain.compat.common.report import KeyReport
from jaxtrain.compat.huggingface import adapter as hf_json
from jaxtrain.compat.prime_rl import tracking, training
from jaxtrain.errors import ConfigError

REJECTED = ("eval", "inference", "weight_broadcast")
# Top-level keys of prime-rl's configs: a TOML with one of them (or a `mode`) is prime-rl's.
_PRIME_RL_KEYS = (
    "max_steps",
    "deployment",
    "ckpt",
    "optim",
    "scheduler",
    "val",
    "eval",
    "inference",
    "orchestrator",
    "trainer",
)
IGNORE_RULES: tuple[tuple[str, str], ...] = (
    ("mode", "selects this adapter"),
    ("log.*", "logging"),
    ("monitors.*", "metric sinks"),
    ("wandb.*", "what extras prime-rl logs to wandb"),
    ("model.attn", "attention kernel choice"),
    ("model.compile*", "torch.compile; XLA compiles every step"),
    ("model.impl", "model implementation choice (HF or custom kernels)"),
    ("model.liger_kernel", "kernel choice"),
    ("model.ac_offloading*", "memory placement"),
    ("model.fsdp_cpu_offload", "memory placement"),
    ("model.optim_cpu_offload", "memory placement"),
    ("model.reshard_after_forward", "FSDP communication detail"),
    ("model.reduce_dtype", "gradients are reduced in float32"),
    ("model.trust_remote_code", "loading detail"),
    ("model.debug.*", "debug switches"),
    ("model.fused_lm_head_token_chunk_size", "kernel choice"),
    ("model.cp_style", "context-parallel kernel choice"),
    ("model.seq_len", "[data] seq_len decides"),
    ("data.num_workers", "data loader workers"),
    ("val.data.num_workers", "data loader"),
    ("val.eval_on_start", "an extra validation pass before training (no effect on training)"),
    ("val.data.batch_size", "validation batches hold [data] batch_size sequences"),
    ("val.data.micro_batch_size", "validation batches hold [data] batch_size sequences"),
    ("deployment.type", "launcher layout"),
    ("deployment.num_infer_gpus", "no inference servers here"),
    ("deployment.gpus_per_node", "launcher layout"),
    ("deployment.num_infer_nodes", "no inference servers here"),
    ("slurm.*", "launcher"),
    ("env_vars.*", "launcher environment"),
    ("gc.*", "Python GC"),
    ("heartbeat.*", "monitoring"),
    ("dist_timeout_seconds", "runtime"),
    ("matmul_precision", "torch float32 matmul precision; XLA's default applies"),
    ("dry_run", "launcher switch"),
    ("tokenizer.*", "tokenizer loading detail"),
)


def is_pretrain(doc: dict[str, Any]) -> bool:
    """mode = "pretrain", or pretrain-shaped (a [data] table with `paths`)."""
    data = doc.get("data")
    return doc.get("mode") == "pretrain" or (
        isinstance(data, dict) and "paths" in data and doc.get("mode") in (None, "pretrain")
    )


def refuse_other_modes(path: Path, doc: dict[str, Any]) -> None:
    """ConfigError for a prime-rl TOML that is not a pretraining one (SFT, RL)."""
    if any(k in doc for k in _PRIME_RL_KEYS) or "mode" in doc:
        found = [f"[{k}]" for k in ("eval", "inference", "data") if k in doc]
        raise ConfigError(
            f'{path}: only prime-rl pretraining files are supported (mode = "pretrain", '
            "or a [data] table with `paths` of datatrove shard folders); this looks like "
            f"an SFT/RL config (mode={doc.get('mode')!r}, {', '.join(found) or 'no paths'})"
            ", which is not a pretraining config."
        )


def _devices_from_deployment(report: KeyReport, doc: dict[str, Any]) -> None:
    """The training devices and hosts of the file's `[deployment]` (one GPU without one)."""
    deployment = doc.get("deployment") or {}
    nodes = (
        int(deployment.get("num_train_nodes", 1)) if deployment.get("type") == "multi_node" else 1
    )
    per_node = (
        int(deployment.get("gpus_per_node", 8))
        if nodes > 1
        else int(deployment.get("num_train_gpus", 1))
    )
    report.world_size, report.num_hosts = nodes * per_node, nodes
    report.world_source = "from [deployment]"
    named = [
        f"{k} = {deployment[k]}"
        for k in ("num_train_gpus", "num_train_nodes", "gpus_per_node")
        if k in deployment
    ]
    report.launch = f"[deployment] {', '.join(named)}" if named else ""
    report.note(f"{nodes * per_node} training GPU(s) from [deployment]")


def to_jaxtrain(r: KeyReport, doc: dict[str, Any]) -> dict[str, Any]:
    """Settings for a prime-rl pretrain TOML; fills the report (the devices from its
    `[deployment]` first)."""
    _devices_from_deployment(r, doc)
    for section in REJECTED:
        if section in doc:
            raise ConfigError(
                f"{r.source}: [{section}] is not allowed with mode = "
                '"pretrain" (prime-rl rejects it: pretraining runs no online '
                "evals, inference servers or weight broadcasts); remove it."
            )
    if doc.get("max_steps") is None:
        raise ConfigError(f"{r.source}: max_steps is required (the run length in steps).")
    s: dict[str, Any] = {"train.steps": int(doc["max_steps"])}
    r.mapped("max_steps", "train.steps")
    name = r.get("model.name")
    if not name:
        raise ConfigError(f"{r.source}: [model] name is required (the architecture to initialise).")
    s.update(hf_json.model_settings(str(name), r, "model.name"))
    s["model.dtype"], s["model.param_dtype"] = "bfloat16", "float32"
    if r.has("model.optimization_dtype"):
        s["model.param_dtype"] = str(r.get("model.optimization_dtype"))
        r.mapped("model.optimization_dtype", "model.param_dtype")
    r.note("compute in bfloat16 with float32 parameters, as prime-rl's FSDP mixed precision")
    training.map_training(r, s, doc)
    tracking.map_wandb(r, s, doc)
    r.finish(IGNORE_RULES)
    return s
