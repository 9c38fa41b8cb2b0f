"""Megatron-LM / Primus keys that have no meaning for jaxtrain, grouped by why.

Patterns are fnmatch patterns over the key name. Keys that change the numbers (dropout, MoE,
FP8, ...) are not here: the Megatron adapter checks them one by one (FP8: `compat.fp8`).
"""

from __future__ import annotations

_KERNELS = ("GPU kernel / fusion choice; XLA compiles and fuses the whole step, the numbers "
            "are the same")
_COMM = ("communication scheduling or overlap of the torch.distributed runtime; XLA schedules "
         "collectives itself")
_LOGGING = "logging, profiling or experiment tracking; jaxtrain writes metrics.jsonl/TensorBoard"
_CKPT_FORMAT = "checkpoint file format/writer detail; jaxtrain writes Orbax checkpoints"
_PRIMUS = "Primus runtime switch (patches, pipeline schedules, offloading, tooling)"
_OTHER_MODELS = "belongs to another model type or task (BERT, T5, vision, retrieval, RL, " \
                "inference), unused in GPT pretraining"
_RUNTIME = "process/runtime control of the PyTorch launcher; no effect on the training numbers"
_FP16 = "loss-scaling setting used only with fp16 training"
_DATALOADER = "data loader worker/caching detail"

IGNORE_RULES: tuple[tuple[str, str], ...] = (
    # kernels and fusions
    ("*_fusion", _KERNELS), ("*_fusion_impl", _KERNELS), ("use_flash_attn", _KERNELS),
    ("attention_backend", _KERNELS), ("transformer_impl", _KERNELS), ("use_turbo_*", _KERNELS),
    ("turbo_*", _KERNELS), ("enable_primus_turbo", _KERNELS), ("enable_turbo_*", _KERNELS),
    ("mxfp4_*", _KERNELS), ("use_te_activation_func", _KERNELS), ("torch_compile.*", _KERNELS),
    ("enable_cuda_graph", _KERNELS), ("cuda_graph_*", _KERNELS), ("external_cuda_graph",
                                                                     _KERNELS),
    ("no_persist_layer_norm", _KERNELS), ("masked_softmax_fusion", _KERNELS),
    ("te_rng_tracker", _KERNELS), ("inference_rng_tracker", _KERNELS),
    ("attention_softmax_in_fp32", "jaxtrain computes attention softmax in float32 always"),
    ("apply_query_key_layer_scaling", "a fp16 overflow guard that leaves the result unchanged"),
    ("clone_scatter_output_in_embedding", _KERNELS), ("disable_compile_dependencies", _KERNELS),
    ("use_sink_attention", _KERNELS), ("sink_*", _KERNELS), ("moe_use_legacy_grouped_gemm",
                                                             _KERNELS),
    ("moe_grouped_gemm", _KERNELS), ("moe_permute_fusion", _KERNELS),
    ("moe_use_fused_router_with_aux_score", _KERNELS), ("moe_shared_expert_overlap", _COMM),
    ("moe_token_dispatcher_type", _COMM), ("moe_enable_deepep", _COMM),
    ("moe_router_dtype", _KERNELS), ("moe_per_layer_logging", _LOGGING),
    ("moe_layer_recompute", "activation recomputation choice (memory only)"),
    ("moe_extended_tp", _COMM), ("moe_use_upcycling", _PRIMUS),
    ("moe_router_force_load_balancing*", "benchmarking switch of Primus' MoE router"),
    ("disable_primus_topk_router", _PRIMUS), ("use_deprecated_20241209_moe_layer", _PRIMUS),
    ("gradient_accumulation_fusion", _KERNELS), ("delay_wgrad_compute", _COMM),
    # communication and distribution runtime
    ("overlap_*", _COMM), ("ddp_*", _COMM), ("tp_comm_*", _COMM), ("align_grad_reduce", _COMM),
    ("align_param_gather", _COMM), ("distributed_backend", _COMM),
    ("distributed_timeout_minutes", _RUNTIME), ("nccl_*", _COMM), ("use_sharp", _COMM),
    ("sharp_enabled_group", _COMM), ("enable_odc", _COMM), ("odc_*", _COMM),
    ("scatter_gather_tensors_in_pipeline", _COMM), ("use_ring_exchange_p2p", _COMM),
    ("local_rank", _RUNTIME), ("lazy_mpu_init", _RUNTIME), ("empty_unused_memory_level",
                                                            _RUNTIME),
    ("gradient_reduce_div_fusion", _COMM), ("suggested_communication_unit_size", _COMM),
    ("num_distributed_optimizer_instances", _COMM), ("use_tp_pp_dp_mapping", _COMM),
    ("replication*", _RUNTIME), ("check_weight_hash_across_dp_replicas_interval", _RUNTIME),
    ("enable_gloo_process_groups", _RUNTIME), ("barrier_with_L1_time", _RUNTIME),
    ("async_tensor_model_parallel_allreduce", _COMM), ("defer_embedding_wgrad_compute", _COMM),
    ("wgrad_deferral_limit", _COMM), ("cp_comm_type", _COMM),
    ("hierarchical_context_parallel_sizes", _COMM), ("high_priority_stream_groups", _COMM),
    ("pipeline_model_parallel_comm_backend", _COMM), ("tp_comm_bootstrap_backend", _COMM),
    ("grad_reduce_in_bf16", _COMM), ("accumulate_allreduce_grads_in_fp32", _COMM),
    ("deterministic_mode", _RUNTIME), ("train_sync_interval", _RUNTIME), ("manual_gc*",
                                                                           _RUNTIME),
    ("exit_signal_handler", "jaxtrain always checkpoints and stops cleanly on SIGTERM/SIGINT"),
    ("exit_on_missing_checkpoint", _RUNTIME), ("adlr_autoresume*", _RUNTIME),
    ("enable_ft_package", _RUNTIME), ("calc_ft_timeouts", _RUNTIME),
    ("run_workload_inspector_server", _RUNTIME), ("inprocess_restart", _RUNTIME),
    ("rerun_mode", _RUNTIME), ("error_injection_*", _RUNTIME), ("enable_experimental",
                                                                _RUNTIME),
    ("check_for_spiky_loss", _RUNTIME), ("check_for_large_grads", _RUNTIME),
    ("check_for_nan_in_loss_and_grad", "jaxtrain always stops on a non-finite loss"),
    ("decrease_batch_size_if_needed", _RUNTIME), ("data_parallel_random_init", _RUNTIME),
    ("use_cpu_initialization", _RUNTIME), ("perform_initialization", _RUNTIME),
    ("pin_cpu_*", _RUNTIME), ("optimizer_offload_fraction", _RUNTIME),
    ("use_torch_optimizer_for_cpu_offload", _RUNTIME), ("overlap_cpu_optimizer_d2h_h2d",
                                                        _RUNTIME),
    ("init_model_with_meta_device", _RUNTIME), ("keep_fp8_transpose_cache_*", _KERNELS),
    # FP16 loss scaling (fp16 itself is checked)
    ("initial_loss_scale", _FP16), ("min_loss_scale", _FP16), ("loss_scale_window", _FP16),
    ("hysteresis", _FP16), ("fp16_lm_cross_entropy", _FP16),
    # logging, profiling, tracking
    ("log_*", _LOGGING), ("tensorboard_*", _LOGGING), ("wandb_*", _LOGGING), ("mlflow_*",
                                                                            _LOGGING),
    ("disable_tensorboard", _LOGGING), ("disable_wandb", _LOGGING), ("disable_mlflow",
                                                                     _LOGGING),
    ("one_logger_*", _LOGGING), ("enable_one_logger", _LOGGING), ("app_tag_*", _LOGGING),
    ("timing_log_*", _LOGGING), ("logging_level", _LOGGING), ("config_logger_dir", _LOGGING),
    ("*sink_level", _LOGGING), ("generate_tracelens_report", _LOGGING), ("profile*", _LOGGING),
    ("use_pytorch_profiler", _LOGGING), ("torch_profiler_*", _LOGGING),
    ("disable_profiler_activity_cpu", _LOGGING), ("iterations_to_skip", _LOGGING),
    ("record_memory_history", _LOGGING), ("memory_snapshot_path", _LOGGING),
    ("use_rocm_mem_info*", _LOGGING), ("wall_clock_step_timer", _LOGGING),
    ("log_straggler", _LOGGING), ("straggler_*", _LOGGING), ("disable_straggler_on_startup",
                                                             _LOGGING),
    ("result_rejected_tracker_filename", _LOGGING),
    # checkpoint format details
    ("ckpt_*", _CKPT_FORMAT), ("dist_ckpt_*", _CKPT_FORMAT), ("async_save", _CKPT_FORMAT),
    ("use_dist_ckpt_deprecated", _CKPT_FORMAT), ("use_persistent_ckpt_worker", _CKPT_FORMAT),
    ("auto_detect_ckpt_format", _CKPT_FORMAT), ("non_persistent_*", _CKPT_FORMAT),
    ("use_checkpoint_args", _CKPT_FORMAT), ("use_mp_args_from_checkpoint_args", _CKPT_FORMAT),
    ("use_tokenizer_model_from_checkpoint_args", _CKPT_FORMAT),
    ("load_main_params_from_ckpt", _CKPT_FORMAT), ("no_save_rng", _CKPT_FORMAT),
    ("no_load_rng", "jaxtrain's random streams are derived from run.seed, not restored"),
    ("override_opt_param_scheduler", "resume-time choice between config and checkpoint "
                                     "schedules; jaxtrain always uses the config's"),
    ("use_checkpoint_opt_param_scheduler", "resume-time choice between config and checkpoint "
                                           "schedules; jaxtrain always uses the config's"),
    # Primus runtime
    ("trainable", _PRIMUS), ("patch_*", _PRIMUS), ("pp_*", _PRIMUS), ("zero_bubble*", _PRIMUS),
    ("enable_zb_runtime", _PRIMUS), ("pre_communication_optimization", _PRIMUS),
    ("enable_optimizer_post_validation", _PRIMUS), ("enable_exactly_numeric_match", _PRIMUS),
    ("enable_zero_bubble", _PRIMUS), ("enable_1f1b_v", _PRIMUS), ("allow_padding_num_layers",
                                                                  _PRIMUS),
    ("profile_memory_iter", _PRIMUS), ("interleave_group_size", _PRIMUS), ("offload*", _PRIMUS),
    ("auto_offload_time", _PRIMUS), ("num_seq_splits", _PRIMUS), ("cpu_offload", _PRIMUS),
    ("debug_scheduler_table", _PRIMUS), ("communication_method", _PRIMUS),
    ("dump_pp_data", _PRIMUS), ("decoder_pipeline_manual_split_list", _PRIMUS),
    ("weight_deosc*", _PRIMUS), ("recompute_layer_ids", _PRIMUS),
    ("model", "Primus' model preset name (the preset's keys are read instead)"),
    # data loader details
    ("num_workers", _DATALOADER), ("dataloader_type", _DATALOADER), ("mmap_bin_files",
                                                                     _DATALOADER),
    ("num_dataset_builder_threads", _DATALOADER), ("data_sharding", _DATALOADER),
    ("dataloader_mp_context", _DATALOADER), ("create_attention_mask_in_dataloader",
                                             _DATALOADER),
    ("mock_dataset.*", "parameters of a custom mock dataset class; jaxtrain draws synthetic "
                       "tokens itself"),
    # other model types and tasks
    ("vision_*", _OTHER_MODELS), ("swin_backbone_type", _OTHER_MODELS), ("num_classes",
                                                                         _OTHER_MODELS),
    ("img_h", _OTHER_MODELS), ("img_w", _OTHER_MODELS), ("num_channels", _OTHER_MODELS),
    ("patch_dim", _OTHER_MODELS), ("classes_fraction", _OTHER_MODELS),
    ("data_per_class_fraction", _OTHER_MODELS), ("retro_*", _OTHER_MODELS),
    ("dino_*", _OTHER_MODELS), ("mask_type", _OTHER_MODELS), ("mask_factor", _OTHER_MODELS),
    ("iter_per_epoch", _OTHER_MODELS), ("inference_*", _OTHER_MODELS), ("max_tokens_to_oom",
                                                                        _OTHER_MODELS),
    ("output_bert_embeddings", _OTHER_MODELS), ("bert_*", _OTHER_MODELS),
    ("flash_decode", _OTHER_MODELS), ("ict_*", _OTHER_MODELS), ("biencoder_*", _OTHER_MODELS),
    ("titles_data_path", _OTHER_MODELS), ("query_in_block_prob", _OTHER_MODELS),
    ("use_one_sent_docs", _OTHER_MODELS), ("evidence_data_path", _OTHER_MODELS),
    ("retriever_*", _OTHER_MODELS), ("block_data_path", _OTHER_MODELS),
    ("embedding_path", _OTHER_MODELS), ("indexer_*", _OTHER_MODELS), ("rl_*", _OTHER_MODELS),
    ("grpo_*", _OTHER_MODELS), ("langrl_*", _OTHER_MODELS), ("perform_rl_step", _OTHER_MODELS),
    ("mask_prob", _OTHER_MODELS), ("short_seq_prob", _OTHER_MODELS), ("sample_rate",
                                                                      _OTHER_MODELS),
    ("encoder_seq_length", _OTHER_MODELS), ("decoder_seq_length", _OTHER_MODELS),
    ("encoder_num_layers", _OTHER_MODELS), ("decoder_num_layers", _OTHER_MODELS),
    ("encoder_tensor_model_parallel_size", _OTHER_MODELS),
    ("encoder_pipeline_model_parallel_size", _OTHER_MODELS), ("vocab_extra_ids", _OTHER_MODELS),
    ("lfm_layer_types", _OTHER_MODELS), ("conv_L_cache", _OTHER_MODELS), ("conv_bias",
                                                                          _OTHER_MODELS),
    ("merge_file", "BPE merges file of GPT2BPETokenizer; the vocabulary size is read instead"),
    ("vocab_file", "vocabulary file of BERT/GPT2 tokenizers; the vocabulary size is read "
                   "instead"),
    ("tiktoken_*", "TikToken tokenizer detail; the vocabulary size is read instead"),
    ("legacy_tokenizer", "Megatron tokenizer implementation switch"),
    ("trust_remote_code", "tokenizer loading switch"),
    ("use_legacy_models", _RUNTIME), ("deprecated_use_mcore_models", _RUNTIME),
    ("yaml_cfg", _RUNTIME), ("spec", _RUNTIME), ("onnx_safe", _RUNTIME), ("test_mode",
                                                                          _RUNTIME),
    ("bert_binary_head", _OTHER_MODELS), ("heterogeneous_layers_config_*", _OTHER_MODELS),
    ("no_fp8_weight_transpose_cache", _KERNELS),
    ("disable_delayed_scaling_patches", "Primus runtime patch of how delayed fp8 scales are "
                                        "updated (the same recipe); jaxtrain updates them in "
                                        "the train step"),
    ("moe_router_padding_for_quantization", "pads each expert's tokens to the fp8 kernels' "
                                            "alignment; the padding rows are zeros, the numbers "
                                            "the same"),
)
