"""Every jaxtrain setting with its default; other configs override only what differs.

Run:  python -m jaxtrain --config configs/base.py --config.data.kind=synthetic
(base alone trains the `debug` Llama on synthetic tokens; real runs start from a preset file.)
"""

from ml_collections import ConfigDict

from jaxtrain.models.presets.registry import model_config


def get_config() -> ConfigDict:
    """The default configuration; `python -m jaxtrain config FILE` prints any resolved one."""
    c = ConfigDict()

    c.run = ConfigDict()
    c.run.name = "debug"  # run name; the run directory defaults to runs/<name>
    c.run.dir = ""  # run directory (metrics, checkpoints, config); "" means runs/<run.name>
    c.run.seed = 0  # seed for parameter init, data order and dropout-free training RNG

    c.model = model_config("llama-debug")  # architecture: see jaxtrain/models/presets/registry.py

    c.train = ConfigDict()
    c.train.steps = 100  # optimizer steps to train for (the run ends at this step)
    c.train.seq_len = 128  # tokens per training sequence (windows are seq_len + 1 long)
    c.train.global_batch_size = 8  # sequences per optimizer step, across all processes
    c.train.micro_batch_size = 0  # sequences per forward/backward; 0 = global (no accumulation)
    c.train.z_loss = 0.0  # weight of the log(Z)^2 auxiliary loss (PaLM); 0 disables it
    c.train.loss_chunks = 0  # >0: output layer + loss in this many chunks of each sequence,
    #   never holding the whole [batch, seq, vocab] float32 logits; 0: all logits at once
    c.train.pipeline_microbatches = 0  # pipeline parallelism (mesh.*_pipeline > 1): parts each
    #   micro batch flows through the stages in (idle share (S-1)/(R M + S-1) for S stages);
    #   0 = the most that split the micro batch evenly over the batch shards, up to 4 x stages
    c.train.pipeline_repeats = 1  # passes of a micro batch over all stages (virtual stages per
    #   device, the circular schedule): more shrink the bubble, but reshuffle the stage
    #   weights every step
    c.train.log_every = 10  # steps between metric lines (console, JSONL, TensorBoard)
    c.train.eval_every = 0  # steps between validation passes; 0 disables periodic validation
    c.train.eval_batches = 8  # validation batches per pass (fixed order, same every time)
    c.train.progress = True  # progress bar on a terminal; plain lines when piped
    c.train.peak_flops = 0.0  # per-device peak FLOP/s for MFU; 0 = known GPU table or measured
    c.train.check_memory = True  # refuse to start a step that needs more memory per device
    #                              than the devices have (compiled plan vs device/host memory)
    c.train.profile_start = 0  # first step of a JAX profiler trace into <run dir>/profile; 0 = none
    c.train.profile_steps = 1  # steps the trace covers (from train.profile_start on)
    c.train.profile_python = False  # also trace the host's Python calls (a million events in
    #   a few steps: the trace viewer's files then drop XLA's operations past the millionth)
    c.train.hang_timeout = 1800.0  # seconds without a completed step before the run prints every
    #   thread's stack and exits 4 (hung data, file system or collective); counted from the
    #   first completed step, so compiling never counts; 0 disables the watch
    c.train.straggler_every = 100  # steps between comparisons of the hosts (a timed matmul on
    #   each, and its data wait): a host behind the others is named in the log; 0 = never
    #   (a single process never compares)
    c.train.straggler_patience = 3  # comparisons in a row a host must be behind to be named
    c.train.straggler_fraction = 0.75  # behind: device rate under this share of the fastest
    #   host's, or data wait longer than the least-waiting host's by (1 - this) of a step

    c.optim = ConfigDict()
    c.optim.lr = 3e-4  # peak learning rate
    c.optim.min_lr = 3e-5  # learning rate at the end of the decay
    c.optim.schedule = "cosine"  # decay shape after warmup: cosine | linear | sqrt | constant
    c.optim.warmup_steps = 10  # linear warmup from warmup_init to lr over these steps
    c.optim.decay_steps = 0  # steps of warmup + decay; 0 = train.steps
    # Schedule variants other stacks use (jaxtrain/train/optimizer.py has the formula):
    c.optim.warmup_init = 0.0  # rate the warmup rises from (Megatron lr_warmup_init)
    c.optim.warmup_offset = 1  # warmup is init + (lr - init) * (s + offset) / W: 1 = the first
    #                            step already moves; 0 = it runs at warmup_init (Megatron, MaxText)
    c.optim.stable_steps = 0  # steps held at lr between warmup and decay (warmup-stable-decay)
    c.optim.after_decay = "min_lr"  # rate past decay_steps: min_lr | zero (MaxText)
    c.optim.weight_decay = 0.1  # decoupled (AdamW) weight decay on matrices, not norms/biases
    c.optim.b1 = 0.9  # Adam beta1
    c.optim.b2 = 0.95  # Adam beta2
    c.optim.eps = 1e-8  # Adam epsilon
    c.optim.clip_grad_norm = 1.0  # global gradient-norm clipping; 0 disables it

    c.data = ConfigDict()
    c.data.kind = "synthetic"  # datatrove | megatron (prefix.bin/.idx) | synthetic | text (raw
    #                            .jsonl(.gz/.zst)/.parquet/.arrayrecord/.txt, tokenized in grain)
    c.data.paths = ""  # training shard folders (or .ds files / Megatron prefixes), comma-separated;
    #                    "0.7:a,0.3:b" mixes weighted sources; megatron also "0.7 pfx_a 0.3 pfx_b"
    c.data.val_paths = ""  # validation data, same syntax; "" = the valid part of data.split, if any
    c.data.weights = ""  # mixture weights, one per data.paths entry ("0.7,0.3"); "" = none
    c.data.split = ""  # Megatron-style "train,valid,test" document split of each dataset, e.g.
    #                    "99,1,0"; "" = every document trains
    c.data.windowing = "pool"  # pool (one pool over all shards, stride seq_len) | per_file
    #                            (each file cut alone into seq_len+1 windows, as datatrove does)
    c.data.reset_attention_mask = False  # batch gets segment_ids: nothing mixes across documents
    c.data.reset_position_ids = False  # batch gets positions restarting at every document start
    c.data.eod_mask_loss = False  # no loss where the input is a document's last token (its EOS)
    c.data.tokenizer = ""  # Hugging Face tokenizer folder, for sampling and .ds.metadata checks
    c.data.prepare = ""  # build missing shards first: "" (never) | "demo" (embedded corpus, into
    #                      the parent folder of data.paths: <root>/train, val; its tokenizer into
    #                      data.tokenizer, or <root>/tokenizer; only folders it made are replaced)
    c.data.shuffle = True  # shuffle windows (a new order each epoch, from run.seed)
    c.data.worker_count = 0  # grain worker processes; 0 reads in the training process
    c.data.prefetch = 4  # batches read ahead by background threads
    c.data.text_key = "text"  # data.kind=text: the JSONL field / Parquet column / Example feature
    c.data.eos_token = ""  # data.kind=text: token appended after each document; "" = tokenizer's
    c.data.reset = False  # resume with changed paths/batch/seq_len/seed: read the new data from
    #                       its first batch, keeping model and optimizer state (else refused)

    c.checkpoint = ConfigDict()
    c.checkpoint.dir = ""  # checkpoint folder; "" = <run dir>/checkpoints
    c.checkpoint.every = 100  # steps between checkpoints (and one at the end); 0 = only at the end
    c.checkpoint.keep = 3  # number of most recent checkpoints to keep; 0 = keep all
    c.checkpoint.keep_every = 0  # also keep for good each checkpoint at a multiple of this; 0 = off
    c.checkpoint.every_minutes = 0.0  # also save when this many minutes passed since a save; 0 off
    c.checkpoint.compression = "none"  # codec of the saved arrays: "none" (fastest) or "zstd"
    #   (smaller files of compressible weights, more CPU per save and restore); any checkpoint
    #   restores whatever codec it was written with
    c.checkpoint.init_from = ""  # weights only, when no own checkpoint: HF folder/run dir/ckpt dir
    c.checkpoint.init_step = -1  # step of init_from (a jaxtrain checkpoint) to read; -1 = latest
    c.checkpoint.resume = True  # continue from the latest checkpoint in the folder if present;
    #                             false starts over, refused where checkpoints exist already
    c.checkpoint.resume_step = -1  # step to resume from, -1 = latest; refused if later ones exist

    c.mesh = ConfigDict()
    for axis in ("data", "pipeline", "fsdp", "context", "expert", "tensor"):
        c.mesh[f"ici_{axis}"] = -1 if axis == "fsdp" else 1  # devices per host on this axis
        c.mesh[f"dcn_{axis}"] = -1 if axis == "data" else 1  # hosts (slices) on this axis
    c.mesh.rules = "fsdp_tensor"  # logical-axis rule preset: fsdp_tensor | fsdp | data

    c.backend = ConfigDict()
    c.backend.target = ""  # hardware the step is compiled for: "" = this machine, or a name of
    #   jaxtrain/hardware/backend.py TARGETS (nvidia-h100, amd-mi300x, cpu-avx2, ...) to plan another's
    c.backend.bf16_products = "auto"  # bfloat16 products: auto (from the hardware) | native
    #   (bfloat16 operands) | widened (operands widened to float32, exact; for CPUs without
    #   bfloat16 dot instructions)
    c.backend.fp8_formats = "auto"  # float8 types of model.quantization=fp8: auto (from the
    #   device) | ocp (e4m3fn/e5m2: NVIDIA, AMD MI350X/MI355X) | fnuz (e4m3fnuz/e5m2fnuz: AMD
    #   MI300X/MI325X, MaxText's nanoo_fp8)
    c.backend.grouped_matmul = "auto"  # the experts' grouped matmul: auto (from the hardware)
    #   | ragged (jax.lax.ragged_dot, the platform's grouped GEMM) | tiles (loops over row tiles
    #   in one group each; CPUs, whose ragged_dot multiplies every row by every expert)
    c.backend.bf16_rounding = "auto"  # float32 -> bfloat16 in products and attention: auto (from
    #   the hardware) | bits (integer operations, faster under XLA:CPU) | convert (XLA's convert);
    #   the same values either way
    c.backend.xla_options = ""  # XLA compiler options of the train and eval steps, NAME=VALUE
    #   separated by commas or spaces: the options XLA_FLAGS sets (with or without its --), for
    #   this run's programs only and kept in its config; e.g.
    #   "xla_gpu_enable_latency_hiding_scheduler=true,xla_gpu_autotune_level=4"
    c.backend.compile_cache = ""  # folder of JAX's persistent compilation cache: a restart
    #   loads the steps compiled before instead of compiling again (one subfolder per kind of
    #   device; shared by the hosts of a multi-host run); "" = JAX's own setting
    #   (JAX_COMPILATION_CACHE_DIR, else none); e.g. "~/.cache/jaxtrain/compile"

    c.sample = ConfigDict()
    c.sample.prompt = ""  # text to continue after training; "" skips the sample
    c.sample.max_new_tokens = 64  # tokens to generate
    c.sample.temperature = 0.0  # 0 = greedy; > 0 samples from softmax(logits / temperature)
    c.sample.top_k = 0  # sample among the k most likely tokens; 0 = all

    # lm-evaluation-harness tasks on the live model (docs/evaluation.md; needs the eval extra).
    c.eval = ConfigDict()
    c.eval.harness_tasks = ""  # comma-separated harness task names or folders/files of local
    #   task YAMLs; "" runs none
    c.eval.harness_every = 0  # steps between harness evaluations; 0 disables them
    c.eval.harness_limit = 0  # examples per task; 0 = every example
    c.eval.harness_fewshot = -1  # few-shot examples per prompt; -1 = each task's own default

    c.metrics = ConfigDict()  # where metrics go besides metrics.jsonl, TensorBoard, console
    c.metrics.wandb_project = ""  # Weights & Biases project; "" = no wandb (pip install wandb)
    c.metrics.wandb_entity = ""  # wandb team or user; "" = the logged-in user's default
    c.metrics.wandb_name = ""  # wandb run name; "" = run.name
    c.metrics.wandb_tags = ""  # comma-separated tags of the wandb run
    c.metrics.wandb_group = ""  # wandb group (runs shown together); "" = none
    c.metrics.wandb_mode = ""  # online | offline | disabled; "" = WANDB_MODE, else online
    c.metrics.wandb_dir = ""  # folder wandb writes its files under; "" = the run directory

    c.lock()
    return c
