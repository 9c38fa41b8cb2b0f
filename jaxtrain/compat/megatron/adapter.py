"""Megatron-LM arguments (as a Primus `framework: megatron` module) -> jaxtrain settings.

Sizes follow Megatron: `micro_batch_size` is per data-parallel rank, so jaxtrain's global micro
batch is micro_batch_size x (world size / (tensor x pipeline x context)); the vocabulary is
padded as Megatron pads it (`model`); the schedule warms up as lr_warmup_init + (lr - lr_warmup_init) * step / warmup (step counted
from 0, so the first step runs at lr_warmup_init), which `optim.warmup_offset=0` reproduces.

The keys are read by concern: `model` (with `mla`, `moe`, `mamba`), `fp8`, `training` (with
`pipeline`); here are the keys jaxtrain accepts only at its fixed behaviour, and `ignored_keys`
those with no meaning for it.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport, is_off
from jaxtrain.compat.megatron import fp8, stragglers, tracking, training
from jaxtrain.compat.megatron.ignored_keys import IGNORE_RULES
from jaxtrain.compat.megatron.mla import MLA_KEYS
from jaxtrain.compat.megatron.model import int_key, map_model, refuse_unbuildable
from jaxtrain.compat.megatron.moe import MOE_KEYS

# (key, value that changes nothing, why any other value cannot be reproduced)
NEUTRAL: tuple[tuple[str, Any, str], ...] = (
    ("hidden_dropout", 0.0, "dropout is not implemented (pretraining runs without it)"),
    ("attention_dropout", 0.0, "dropout is not implemented (pretraining runs without it)"),
    ("swiglu", True, "only the SwiGLU MLP exists"),
    ("normalization", "RMSNorm", "only RMSNorm exists"),
    ("apply_layernorm_1p", False, "zero-centred norm weights are not implemented"),
    ("apply_residual_connection_post_layernorm", False, "only pre-norm residuals exist"),
    ("position_embedding_type", "rope", "only rotary position embeddings exist"),
    ("rotary_percent", 1.0, "partial rotary embeddings are not implemented"),
    ("rotary_interleaved", False, "interleaved rotary pairs are not implemented"),
    ("qk_l2_norm", False, "L2 q/k normalisation is not implemented"),
    ("quick_geglu", False, "only the SwiGLU MLP exists"),
    ("openai_gelu", False, "only the SwiGLU MLP exists"),
    ("squared_relu", False, "only the SwiGLU MLP exists"),
    ("fp32_residual_connection", False, "the residual stream follows model.dtype"),
    ("init_method_xavier_uniform", False, "only normal initialisation exists"),
    ("fp16", False, "fp16 with loss scaling is not implemented; use bf16"),
    ("optimizer", "adam", "only AdamW exists (Megatron's `adam` is AdamW)"),
    ("head_lr_mult", 1.0, "per-layer learning-rate multipliers are not implemented"),
    ("weight_decay_incr_style", "constant", "weight-decay schedules are not implemented"),
    ("rampup_batch_size", None, "batch-size ramp-up is not implemented"),
    ("skip_train", False, "evaluation-only runs are not implemented"),
    ("full_validation", False, "validation runs train.eval_batches batches"),
    ("multiple_validation_sets", False, "one validation set is supported"),
    ("optimizer_cpu_offload", False, "optimizer offload to the host is not implemented"),
    ("use_precision_aware_optimizer", False, "optimizer state is kept in float32"),
    ("decoupled_lr", None, "separate embedding learning rates are not implemented"),
    ("decoupled_min_lr", None, "separate embedding learning rates are not implemented"),
    ("start_weight_decay", None, "weight-decay schedules are not implemented"),
    ("end_weight_decay", None, "weight-decay schedules are not implemented"),
    ("exit_interval", None, "runs stop at train.steps only"),
    ("exit_duration_in_mins", None, "runs stop at train.steps only"),
    (
        "attn_logit_softcapping",
        None,
        "Primus' Megatron patches do not apply it (its grok2.yaml "
        "leaves it off: 'Not working yet')",
    ),
    ("main_grads_dtype", "fp32", "gradients are accumulated in float32"),
    ("main_params_dtype", "fp32", "master parameters are float32"),
    ("exp_avg_dtype", "fp32", "Adam moments are float32"),
    ("exp_avg_sq_dtype", "fp32", "Adam moments are float32"),
    ("loss_scale", None, "fp16 loss scaling is not implemented"),
    ("fp4", None, "FP4 training is not implemented"),
    ("no_save_optim", None, "checkpoints always hold the optimizer state"),
    ("train_samples", None, "sample-based run lengths are not implemented; set train_iters"),
    ("lr_warmup_samples", 0, "sample-based schedules are not implemented; use lr_warmup_iters"),
    ("lr_decay_samples", None, "sample-based schedules are not implemented; use lr_decay_iters"),
    ("lr_wsd_decay_samples", None, "sample-based schedules are not implemented"),
    (
        "rope_type",
        (None, "rope"),
        "only plain rotary embeddings (and llama3 scaling; YaRN with multi-latent attention) exist",
    ),
)


def _neutral(report: KeyReport, mla: bool) -> None:
    for key, neutral, why in NEUTRAL:
        if not report.has(key) or report.handled(key):
            continue
        value = report.get(key)
        accepted = neutral if isinstance(neutral, tuple) else (neutral,)
        same = any(
            value == a
            or (a is None and is_off(value))
            or (isinstance(a, float) and isinstance(value, (int, float)) and float(value) == a)
            for a in accepted
        )
        if same:
            report.ignored(key, "matches jaxtrain's fixed behaviour")
        else:
            report.unsupported(key, why)
    if report.has("multi_latent_attention") and not mla:
        report.ignored("multi_latent_attention", "off: grouped-query attention")
    for key in MOE_KEYS:
        if report.has(key) and not report.handled(key):
            if not report.get("num_experts"):
                report.ignored(key, "no experts (num_experts unset): a dense model")
            elif is_off(report.get(key)):
                report.ignored(key, "unset/off: asks for nothing")
            else:
                report.unsupported(key, "an expert setting jaxtrain has no counterpart for")
    for key in MLA_KEYS:
        if report.has(key) and not report.handled(key):
            report.ignored(
                key,
                "used only with multi-latent attention (its YaRN rotary "
                "embeddings included), off here",
            )


def to_jaxtrain(r: KeyReport, default_origins: tuple[str, ...] = ()) -> dict[str, Any]:
    """Settings ({jaxtrain key: value}) for a resolved Megatron module; fills the report."""
    refuse_unbuildable(r)
    s: dict[str, Any] = {}
    tp = int_key(r, "tensor_model_parallel_size", 1)
    map_model(r, s, tp)
    fp8.map_fp8(r, s)
    training.map_training(r, s, tp)
    tracking.map_tracking(r, s)
    stragglers.map_stragglers(r, s)
    _neutral(r, bool(r.get("multi_latent_attention")))
    r.finish(IGNORE_RULES, default_origins)
    return s
