"""MaxText configs (native YAML, or a Primus `framework: maxtext` module) -> jaxtrain settings.

The architecture is `model`'s (experts: `moe`), or for a model_name whose models/*.yml is not
at hand, the jaxtrain preset of the table below; `fp8`, `training` (with `pipeline`) read the
rest, and `files` resolves the base_config chain the keys come from. Here are the keys jaxtrain
accepts only at its fixed behaviour and those with no meaning for it.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport, is_off
from jaxtrain.compat.maxtext import fp8, model, tracking, training
from jaxtrain.errors import ConfigError
from jaxtrain.models.presets.registry import model_config

# MaxText model_name -> jaxtrain preset, for when MaxText's models/<name>.yml is not at hand.
MODELS = {
    "llama2-7b": "llama2-7b",
    "llama2-13b": "llama2-13b",
    "llama2-70b": "llama2-70b",
    "llama3-8b": "llama3-8b",
    "llama3-70b": "llama3-70b",
    "llama3.1-8b": "llama3.1-8b",
    "llama3.1-70b": "llama3.1-70b",
    "llama3.1-405b": "llama3.1-405b",
    "llama3.3-70b": "llama3.3-70b",
    "mistral-7b": "mistral-7b",
    "qwen3-0.6b": "qwen3-0.6b",
    "qwen3-4b": "qwen3-4b",
    "qwen3-8b": "qwen3-8b",
    "qwen3-14b": "qwen3-14b",
    "qwen3-32b": "qwen3-32b",
    "qwen3-1.7b": "qwen3-1.7b",
    "qwen2.5-7b": "qwen2.5-7b",
    "qwen2.5-14b": "qwen2.5-14b",
    "mixtral-8x7b": "mixtral-8x7b",
    "mixtral-8x22b": "mixtral-8x22b",
    "qwen3-30b-a3b": "qwen3-30b-a3b",
    "qwen3-235b-a22b": "qwen3-235b-a22b",
    "deepseek2-16b": "deepseek-v2-lite",
    "deepseek2-236b": "deepseek-v2",
    "deepseek3-671b": "deepseek-v3",
    "gpt-oss-20b": "gpt-oss-20b",
    "gpt-oss-120b": "gpt-oss-120b",
    "llama4-17b-16e": "llama4-scout-17b-16e",
    "llama4-17b-128e": "llama4-maverick-17b-128e",
    "olmo3-7b": "olmo3-7b",
    "olmo3-32b": "olmo3-32b",
    "gpt3-175b": "gpt3-175b",
}
REMAT = {
    "full": "full",
    "minimal": "minimal",
    "minimal_flash": "minimal",
    "minimal_with_context": "minimal",
    "save_dot_except_mlpwi": "dots",
    "save_dot_except_mlp": "dots",
    "save_qkv_proj": "dots",
    "qkv_proj_offloaded": "dots",
    "minimal_offloaded": "minimal",
    "none": "none",
}
NEUTRAL: tuple[tuple[str, Any, str], ...] = (
    ("global_parameter_scale", 1, "scaled model sizes are not implemented; set base_* dims"),
    ("mtp_num_layers", 0, "multi-token prediction is not implemented"),
    ("use_post_attn_norm", False, "post-attention norms are not implemented"),
    ("use_post_ffw_norm", False, "post-MLP norms are not implemented"),
    ("final_logits_soft_cap", 0.0, "logit soft-capping is not implemented"),
    ("attn_logits_soft_cap", 0.0, "logit soft-capping is not implemented"),
    ("training_objective", "causal_lm", "only next-token prediction exists"),
    ("partial_rotary_factor", 1.0, "partial rotary embeddings are not implemented"),
    ("num_kv_shared_layers", 0, "shared KV layers are not implemented"),
    ("share_kv_projections", False, "shared K/V projections are not implemented"),
    ("use_dpo", False, "DPO is not pretraining"),
    ("use_sft", False, "SFT is not pretraining"),
    ("skip_step_on_spikes", False, "spike skipping is not implemented"),
    ("trainable_parameters_mask", [], "freezing parameters is not implemented"),
    ("reuse_example_batch", 0, "repeating one batch is not implemented"),
    ("enable_diloco", False, "DiLoCo is not implemented"),
    ("opt_type", "adamw", "only AdamW exists"),
    ("adam_eps_root", 0.0, "eps inside the root is not implemented"),
    ("rope_min_timescale", 1, "a rotary minimum timescale other than 1 is not implemented"),
    ("use_qk_clip", False, "QK-clip is not implemented"),
)
_WHY = {
    "profil": "profiling",
    "dump_": "debug dumps",
    "log_": "logging",
    "hf_": "Hugging Face dataset/hub access (only with dataset_type=hf)",
    "grain_": "grain data input (only with dataset_type=grain)",
    "checkpoint_": "checkpoint writer detail",
    "sa_": "attention kernel block sizes",
    "local_sa_": "attention kernel block sizes",
    "jax_": "JAX runtime setting",
}
IGNORE_RULES: tuple[tuple[str, str], ...] = (
    (
        (
            "jax_cache_dir",
            "JAX's compilation cache folder (base.yml's ~/jax_cache): jaxtrain keeps a cache "
            "only where backend.compile_cache names one",
        ),
    )
    + tuple((f"{prefix}*", why) for prefix, why in _WHY.items())
    + (
        ("async_checkpointing", "checkpoint writer detail"),
        ("enable_tensorboard", "logging"),
        ("metrics_file", "logging"),
        ("gcs_metrics", "logging"),
        ("enable_wandb", "logging"),
        ("wandb_*", "logging"),
        ("upload_all_profiler_results", "profiling"),
        ("hardware", "device kind; jaxtrain uses the JAX backend it finds"),
        ("attention", "attention kernel choice (the numbers are the same)"),
        ("use_iota_embed", "embedding kernel choice"),
        ("shardy", "XLA partitioner choice"),
        ("logical_axis_rules", "jaxtrain has its own rule table (mesh.rules)"),
        ("data_sharding", "jaxtrain's rule table shards the batch"),
        ("mesh_axes", "mesh layout"),
        ("param_scan_axis", "layout of stacked layers"),
        ("logits_dot_in_fp32", "precision detail"),
        ("cast_logits_to_fp32", "the loss is computed in float32"),
        ("float32_*", "precision"),
        ("kv_quant_*", "inference KV cache"),
        ("quantize_kvcache", "inference KV cache"),
        ("checkpoint_is_quantized", "inference"),
        ("packing", "jaxtrain packs documents always"),
        ("max_segments_per_seq", "packing detail"),
        ("tokenizer_type", "tokenizer loading detail"),
        ("add_bos", "tokenization detail"),
        ("add_eos", "tokenization detail"),
        ("optimizer_memory_host_offload", "memory placement"),
        ("grad_dtype", "float32 grads"),
        ("mu_dtype", "Adam's first moment follows the parameter dtype, as in jaxtrain"),
        ("data_shuffle_seed", "jaxtrain shuffles with run.seed"),
        ("trainable", "Primus runtime"),
        ("*sink_level", "logging"),
        ("model", "Primus' model preset name"),
        ("override_model_config", "decides how the model file merges (already applied)"),
        ("base_config", "the MaxText base file (already merged)"),
        ("skip_first_n_steps_for_profiler", "profiling"),
        ("profiler_steps", "profiling"),
        ("sharding_tolerance", "sharding check"),
        ("override_logical_axis_rules", "sharding rules"),
        ("shard_mode", "sharding mode"),
        ("moe_dispatch_no_expert_sharding", "expert sharding"),
        ("use_batch_split_schedule", "overlap schedule (same numbers)"),
        ("pipeline_delay_activation_forwarding", "pipeline overlap detail (same numbers)"),
        ("pipeline_fsdp_ag_*", "when pipeline stages gather their weights (same numbers)"),
        ("scan_pipeline_*", "loop structure of the pipeline (same numbers)"),
        ("scan_layers_per_stage", "loop structure of the pipeline (same numbers)"),
        ("set_remat_policy_on_*", "where the pipeline rematerialises (memory only)"),
    )
    + tuple(
        (pattern, "vision encoder setting, unused without use_multimodal")
        for pattern in model.VISION_KEYS
    )
)


def _model(r: KeyReport, s: dict[str, Any], from_table: str) -> None:
    seq = int(r.get("max_target_length"))
    if from_table:
        if from_table not in MODELS:
            raise ConfigError(
                f"{r.source}: model_name={from_table!r} has no models/*.yml at "
                "hand and is not in jaxtrain's MaxText table; known: "
                f"{', '.join(sorted(MODELS))}. Pass --maxtext-root."
            )
        preset = MODELS[from_table]
        fields = dict(model_config(preset, max_seq_len=max(seq, 1)))
        r.mapped("model_name", "model.*", f"jaxtrain preset {preset} (offline table)")
        r.note(f"architecture of {from_table} from jaxtrain's offline table ({preset})")
    else:
        fields = model.architecture(r, seq)
        if r.has("model_name"):
            r.mapped(
                "model_name",
                "model.*",
                "its models/*.yml was merged"
                if r.get("model_name") != "default"
                else "default: the base_* keys",
            )
    fields["max_seq_len"] = seq
    if r.handled("normalize_embedding_logits"):
        pass  # the block's own mapping read it (Gemma's)
    elif r.get("logits_via_embedding") and r.get("normalize_embedding_logits"):
        r.unsupported(
            "normalize_embedding_logits", "tied logits divided by sqrt(emb_dim) are not implemented"
        )
    elif r.has("normalize_embedding_logits"):
        r.ignored("normalize_embedding_logits", "applies only with logits_via_embedding")
    s.update({f"model.{k}": v for k, v in fields.items() if k != "preset"})
    s["model.dtype"] = str(r.get("dtype"))
    s["model.param_dtype"] = str(r.get("weight_dtype"))
    s["model.scan_layers"] = bool(r.get("scan_layers", True))
    policy = str(r.get("remat_policy"))
    s["model.remat"] = REMAT.get(policy, "full")
    r.mapped("dtype", "model.dtype")
    r.mapped("weight_dtype", "model.param_dtype")
    r.mapped(
        "remat_policy",
        "model.remat",
        "memory/speed only"
        + ("" if policy in REMAT else f"; {policy!r} approximated by full remat"),
    )
    if r.has("scan_layers"):
        r.mapped("scan_layers", "model.scan_layers")
    dropout = bool(r.get("enable_dropout")) and bool(r.get("dropout_rate"))
    for key in ("dropout_rate", "enable_dropout"):
        if r.has(key) and dropout:
            r.unsupported(key, "dropout is not implemented")
        elif r.has(key):
            r.ignored(key, "no dropout: enable_dropout is false or dropout_rate is 0")


def to_jaxtrain(r: KeyReport, from_table: str = "") -> dict[str, Any]:
    """Settings for a resolved MaxText config; fills the report."""
    s: dict[str, Any] = {}
    _model(r, s, from_table)
    fp8.map_fp8(r, s)
    training.map_training(r, s)
    tracking.map_profiler(r, s)
    tracking.map_wandb(r, s)
    for key, neutral, why in NEUTRAL:
        if r.has(key) and not r.handled(key):
            value = r.get(key)
            if value == neutral or (is_off(neutral) and is_off(value)):
                r.ignored(key, "matches jaxtrain's fixed behaviour")
            else:
                r.unsupported(key, why)
    r.finish(IGNORE_RULES, getattr(r, "default_origins", ()))
    return s
