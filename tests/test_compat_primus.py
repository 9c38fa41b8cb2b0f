"""Primus experiment YAMLs: resolution (env, extends, preset merge order, overrides) and the
Megatron / TorchTitan / MaxText mappings of the real examples, checked against values read from
the files by hand."""

import textwrap

import pytest

from jaxtrain import compat
from jaxtrain.commands import config as config_report
from jaxtrain.compat.megatron.expert_layers import moe_layers
from jaxtrain.errors import ConfigError

EXAMPLES = "Primus/examples/{}/configs/MI300X/{}"
PUBLISHED = {
    "llama2-7b": 6_738_415_616,
    "llama3.1-8b": 8_030_261_248,
    "qwen3-8b": 8_190_735_360,
    "qwen3-0.6b": 596_049_920,
}


def load(samples, framework, name, **kwargs):
    kwargs.setdefault("env", {})
    return compat.load_foreign(samples / EXAMPLES.format(framework, name), **kwargs)


def derived(cfg, report):
    return config_report.derived(cfg, report.world_size, report.num_hosts)


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def fake_primus(tmp_path):
    """A minimal Primus tree: module preset with an extends chain, a model preset."""
    root = tmp_path / "Primus"
    write(root, "primus/configs/modules/module_base.yaml", "trainable: false\nsink_level: null\n")
    write(
        root,
        "primus/configs/modules/megatron/base.yaml",
        """\
        extends: ../module_base.yaml
        trainable: true
        train_iters: 10
        global_batch_size: 8
        micro_batch_size: 1
        seq_length: 32
        lr: 1.0e-3
        min_lr: 0.0
        lr_decay_style: cosine
        lr_warmup_iters: 2
        mock_data: true
        seed: 7
        bf16: false
        tensor_model_parallel_size: ${PRIMUS_TP:1}
        make_vocab_size_divisible_by: 128
        """,
    )
    write(
        root,
        "primus/configs/modules/megatron/trainer.yaml",
        """\
        extends: [base.yaml]
        hidden_size: 999   # a module key: the model preset must not replace it
        """,
    )
    write(
        root,
        "primus/configs/models/megatron/tiny.yaml",
        """\
        num_layers: 2
        hidden_size: 64
        ffn_hidden_size: 128
        num_attention_heads: 4
        normalization: RMSNorm
        swiglu: true
        position_embedding_type: rope
        untie_embeddings_and_output_weights: true
        max_position_embeddings: 64
        tokenizer_type: NullTokenizer
        vocab_size: 255
        seq_length: 16   # the module's seq_length wins
        """,
    )
    return root


def experiment(root, overrides="", framework="megatron", name="exp.yaml", extra=""):
    body = textwrap.indent(textwrap.dedent(overrides), " " * 6)
    return write(
        root,
        f"examples/{name}",
        f"""\
work_group: ${{TEAM:amd}}
user_name: me
exp_name: ${{EXP:tiny}}
workspace: ./out
{extra}modules:
  pre_trainer:
    framework: {framework}
    config: trainer.yaml
    model: tiny.yaml
    overrides:
{body or "      {}"}
""",
    )


def test_preset_merge_order_env_types_and_cli(fake_primus):
    exp = experiment(fake_primus, "hidden_size: 64\nlr: ${LR:2.0e-3}\n")
    cfg, report = compat.load_foreign(
        exp, env={"PRIMUS_TP": "1", "EXP": "run7"}, native_overrides=["train_iters=4"]
    )
    assert cfg.model.hidden_size == 64  # overrides win over the module's 999
    assert cfg.train.seq_len == 32  # the model preset only fills keys the module lacks
    assert cfg.optim.lr == 2e-3 and isinstance(report.get("lr"), float)  # ${LR:2.0e-3} -> float
    assert report.get("tensor_model_parallel_size") == 1  # ${PRIMUS_TP} from env -> int
    assert cfg.train.steps == 4  # command line wins
    assert cfg.run.name == "run7" and cfg.run.dir == "./out/amd/me/run7"
    assert cfg.model.vocab_size == 256  # NullTokenizer: vocab_size + 1, padded to 128
    assert report.entries["train_iters"].origin == "command line"
    assert report.entries["trainable"].status == "ignored"  # from ../module_base via extends


def test_missing_env_var_names_file_and_variable(fake_primus):
    exp = experiment(fake_primus, "seq_length: ${SEQ}\n")
    with pytest.raises(ConfigError, match=r"exp\.yaml.*seq_length.*'SEQ'"):
        compat.load_foreign(exp, env={})


def test_bad_yaml_files_are_clear_errors(fake_primus, tmp_path):
    write(fake_primus, "primus/configs/modules/megatron/loop_a.yaml", "extends: loop_b.yaml\n")
    write(fake_primus, "primus/configs/modules/megatron/loop_b.yaml", "extends: [loop_a.yaml]\n")
    exp = experiment(fake_primus)
    exp.write_text(exp.read_text().replace("config: trainer.yaml", "config: loop_a.yaml"))
    with pytest.raises(ConfigError, match="extends loop: .*loop_a.yaml -> .*loop_b.yaml"):
        compat.load_foreign(exp, env={})
    exp.write_text(exp.read_text().replace("config: loop_a.yaml", "config: nothere.yaml"))
    with pytest.raises(ConfigError, match="module preset 'nothere.yaml' not found"):
        compat.load_foreign(exp, env={})
    write(fake_primus, "primus/configs/modules/megatron/gap.yaml", "extends: [missing.yaml]\n")
    exp.write_text(exp.read_text().replace("config: nothere.yaml", "config: gap.yaml"))
    with pytest.raises(
        ConfigError,
        match=r"missing\.yaml does not exist \(listed in `extends` "
        r"of .*gap\.yaml\)",
    ):
        compat.load_foreign(exp, env={})
    listed = write(tmp_path, "list.yaml", "- a\n- b\n")
    with pytest.raises(ConfigError, match="list.yaml holds a list, not a mapping"):
        compat.load_foreign(listed, env={})
    broken = write(tmp_path, "broken.yaml", "modules:\n  pre_trainer: [unclosed\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml: YAML syntax error at line \d+"):
        compat.load_foreign(broken, env={})


def test_unsupported_framework_is_named(fake_primus):
    exp = experiment(fake_primus, framework="megatron_bridge")
    with pytest.raises(
        ConfigError,
        match=r"exp\.yaml: modules\.pre_trainer\.framework="
        r"'megatron_bridge' is not supported",
    ):
        compat.load_foreign(exp, env={})


def test_moe_layer_freq_is_parsed_not_evaluated():
    assert moe_layers("([0]*1+[1]*26)", 27) == [0] + [1] * 26
    assert moe_layers(2, 4) == [1, 0, 1, 0]
    assert moe_layers("[1, 0, 1]", 3) == [1, 0, 1]
    with pytest.raises(ConfigError, match="neither an int nor a list pattern"):
        moe_layers("__import__('os').system('true')", 2)


def test_megatron_llama2_7b(compat_samples):
    cfg, report = load(compat_samples, "megatron", "llama2_7B-BF16-pretrain.yaml")
    m = cfg.model
    assert (
        m.num_layers,
        m.hidden_size,
        m.intermediate_size,
        m.num_heads,
        m.num_kv_heads,
        m.head_dim,
        m.vocab_size,
    ) == (32, 4096, 11008, 32, 32, 128, 32000)
    assert m.norm_eps == 1e-6 and m.init_std == 0.008 and m.rope_theta == 10000.0
    assert not m.tie_embeddings and m.dtype == "bfloat16" and m.param_dtype == "float32"
    d = derived(cfg, report)
    assert d["num_params"] == PUBLISHED["llama2-7b"]
    # micro_batch_size 4 per rank x 8 data-parallel ranks; 256 / 32 = 8 accumulation steps.
    assert (cfg.train.micro_batch_size, cfg.train.global_batch_size, cfg.train.seq_len) == (
        32,
        256,
        4096,
    )
    assert d["grad_accumulation_steps"] == 8 and d["tokens_per_step"] == 256 * 4096
    o = cfg.optim
    assert (o.lr, o.min_lr, o.warmup_steps, o.decay_steps, o.schedule) == (
        1e-5,
        0.0,
        2,
        50,
        "cosine",
    )
    assert (o.warmup_offset, o.weight_decay, o.b1, o.b2, o.clip_grad_norm) == (
        0,
        0.1,
        0.9,
        0.95,
        1.0,
    )
    assert d["mesh"] == {
        "data": 1,
        "pipeline": 1,
        "fsdp": 8,
        "context": 1,
        "expert": 1,
        "tensor": 1,
    }
    assert cfg.data.kind == "synthetic" and cfg.train.eval_every == 0
    assert cfg.run.seed == 1234 and cfg.train.steps == 50
    # save: null writes no checkpoints; a rerun still resumes (from jaxtrain's final one), and
    # nothing is deleted, as Megatron deletes no checkpoint.
    assert (cfg.checkpoint.every, cfg.checkpoint.resume, cfg.checkpoint.keep) == (0, True, 0)
    assert report.by_status("unsupported") == []
    assert report.entries["enable_primus_turbo"].status == "ignored"
    assert any("offline table" in note for note in report.notes)


def test_megatron_world_size_from_the_launcher_environment(compat_samples):
    cfg, report = load(
        compat_samples,
        "megatron",
        "llama2_7B-BF16-pretrain.yaml",
        env={"NNODES": "2", "GPUS_PER_NODE": "8"},
    )
    assert report.world_size == 16 and cfg.train.micro_batch_size == 64
    assert derived(cfg, report)["mesh"]["data"] == 2  # one data-parallel group per node


def test_megatron_llama31_8b_and_qwen3_8b(compat_samples):
    cfg, report = load(compat_samples, "megatron", "llama3.1_8B-BF16-pretrain.yaml")
    m = cfg.model
    assert (m.num_kv_heads, m.intermediate_size, m.vocab_size, m.rope_theta, m.max_seq_len) == (
        8,
        14336,
        128256,
        500000.0,
        8192,
    )
    assert m.rope_scaling == "none"  # the Primus preset leaves use_rope_scaling off
    assert derived(cfg, report)["num_params"] == PUBLISHED["llama3.1-8b"]
    assert (cfg.train.micro_batch_size, cfg.train.global_batch_size) == (16, 128)

    cfg, report = load(compat_samples, "megatron", "qwen3_8B-BF16-pretrain.yaml")
    m = cfg.model
    # Qwen3's tokenizer has 151669 entries, padded to 151680; the Primus preset sets no
    # qk_layernorm, so unlike Hugging Face's Qwen3-8B there are no q/k norms.
    assert (m.vocab_size, m.qk_norm, m.num_kv_heads, m.rope_theta) == (151680, False, 8, 1000000.0)
    fewer = 36 * 2 * 128 + (151936 - 151680) * 4096 * 2
    assert derived(cfg, report)["num_params"] == PUBLISHED["qwen3-8b"] - fewer
    cfg, _ = load(
        compat_samples,
        "megatron",
        "qwen3_8B-BF16-pretrain.yaml",
        native_overrides=["tensor_model_parallel_size=2"],
    )
    assert cfg.model.vocab_size == 151808 and cfg.mesh.ici_tensor == 2  # padded to 128 x 2
    assert cfg.train.micro_batch_size == 8  # 2 per rank x 4 data-parallel ranks


def test_megatron_fp8_maps_to_fp8_matmuls_and_refuses_block_scaling(compat_samples):
    cfg, report = load(compat_samples, "megatron", "llama2_7B-FP8-pretrain.yaml")
    m = cfg.model
    # fp8: hybrid with Primus' trainer defaults: delayed scaling, 1024 steps of amax, max.
    assert (
        m.quantization,
        m.fp8_format,
        m.fp8_recipe,
        m.fp8_amax_history,
        m.fp8_amax_algo,
        m.fp8_margin,
        m.fp8_output_layer,
    ) == ("fp8", "hybrid", "delayed", 1024, "max", 0, False)
    assert report.entries["fp8"].status == "mapped" and m.dtype == "bfloat16"
    assert report.entries["fp8_wgrad"].status == "ignored"
    cfg, _ = load(
        compat_samples,
        "megatron",
        "llama2_7B-FP8-pretrain.yaml",
        native_overrides=["fp8_recipe=tensorwise", "fp8=e4m3"],
    )
    assert (cfg.model.fp8_recipe, cfg.model.fp8_format) == ("current", "e4m3")
    with pytest.raises(
        ConfigError,
        match=r"1 unsupported key\(s\): fp8_recipe='mxfp8': "
        r"block-scaled fp8 is not implemented",
    ):
        load(
            compat_samples,
            "megatron",
            "llama2_7B-FP8-pretrain.yaml",
            native_overrides=["fp8_recipe=mxfp8"],
        )
    _, report = load(
        compat_samples,
        "megatron",
        "llama2_7B-FP8-pretrain.yaml",
        native_overrides=["fp8_dot_product_attention=true"],
        allow_unsupported=True,
    )
    assert [e.key for e in report.by_status("unsupported")] == ["fp8_dot_product_attention"]


@pytest.mark.parametrize(
    "name,experts,dense",
    [
        ("deepseek_v2_lite-BF16-pretrain.yaml", 64, 1),
        ("mixtral_8x7B_v0.1-BF16-pretrain.yaml", 8, 0),
        ("qwen3_30B_A3B-BF16-pretrain.yaml", 128, 0),
    ],
)
def test_megatron_moe_examples_map_their_experts(compat_samples, name, experts, dense):
    cfg, report = load(
        compat_samples, "megatron", name, allow_unsupported=True, env={"PRIMUS_SEQ_LENGTH": "2048"}
    )
    assert report.entries["num_experts"].status == "mapped"
    assert (cfg.model.num_experts, cfg.model.num_dense_layers) == (experts, dense)
    assert report.entries["moe_router_topk"].status == "mapped"
    if name.startswith("deepseek"):
        assert cfg.train.seq_len == 2048  # ${PRIMUS_SEQ_LENGTH:4096} from the environment
        assert report.entries["multi_latent_attention"].status == "ignored"  # off here
        # DeepSeek-V2's tokenizer (100015 entries, offline table) padded to 128: 100096.
        assert report.entries["tokenizer_model"].status == "mapped"
        assert cfg.model.vocab_size == 100096
        with pytest.raises(ConfigError, match="moe_router_load_balancing_type='seq_aux_loss'"):
            load(compat_samples, "megatron", name)


def test_torchtitan_qwen3_06b(compat_samples):
    cfg, report = load(compat_samples, "torchtitan", "qwen3_0.6B-pretrain.yaml")
    assert cfg.model.preset == "qwen3-0.6b" and cfg.model.max_seq_len == 4096
    d = derived(cfg, report)
    assert d["num_params"] == PUBLISHED["qwen3-0.6b"]
    # local_batch_size 4 x data-parallel degree 8; global -1 means no accumulation.
    assert (
        cfg.train.micro_batch_size,
        cfg.train.global_batch_size,
        cfg.train.seq_len,
        cfg.train.steps,
    ) == (32, 32, 4096, 50)
    o = cfg.optim
    assert (o.lr, o.warmup_steps, o.schedule, o.min_lr, o.decay_steps, o.stable_steps) == (
        3e-4,
        2,
        "linear",
        0.0,
        50,
        0,
    )
    assert (o.b1, o.b2, o.weight_decay, o.warmup_offset) == (0.9, 0.95, 0.1, 1)
    assert cfg.data.kind == "synthetic" and cfg.model.remat == "none"
    assert d["mesh"]["fsdp"] == 8 and cfg.checkpoint.every == 0
    assert report.by_status("unsupported") == []


def test_torchtitan_llama31_8b_needs_data(compat_samples):
    name = "llama3.1_8B-BF16-pretrain.yaml"
    with pytest.raises(ConfigError, match="training.dataset='c4'"):
        load(compat_samples, "torchtitan", name)
    cfg, report = load(
        compat_samples,
        "torchtitan",
        name,
        overrides={"data.kind": "datatrove", "data.paths": "shards/train"},
    )
    assert report.entries["training.dataset"].status == "ignored"  # replaced by data.paths
    assert cfg.model.preset == "llama3.1-8b" and cfg.model.max_seq_len == 8192
    assert derived(cfg, report)["num_params"] == PUBLISHED["llama3.1-8b"]
    assert (cfg.optim.lr, cfg.optim.warmup_steps) == (8e-4, 10)  # module preset lr, exp warmup
    assert (cfg.train.micro_batch_size, cfg.train.seq_len) == (32, 8192)


def test_maxtext_llama2_7b(compat_samples):
    cfg, report = load(compat_samples, "maxtext", "llama2_7B-bf16-pretrain.yaml")
    m = cfg.model
    assert cfg.model.preset == "llama2-7b"  # dims from MaxText's models/llama2-7b.yml
    assert (m.param_dtype, m.dtype, m.remat, m.max_seq_len) == (
        "bfloat16",
        "bfloat16",
        "minimal",
        4096,
    )
    d = derived(cfg, report)
    assert d["num_params"] == PUBLISHED["llama2-7b"]
    # per_device_batch_size 12 x 8 devices; base.yml: lr 3e-5, warmup 10% of 50 steps,
    # cosine to 10%, reached at step 49 (base.yml has learning_rate_final_fraction).
    assert (cfg.train.global_batch_size, cfg.train.micro_batch_size, cfg.train.steps) == (
        96,
        96,
        50,
    )
    o = cfg.optim
    assert (o.lr, o.min_lr, o.warmup_steps, o.decay_steps, o.warmup_offset) == pytest.approx(
        (3e-5, 3e-6, 5, 49, 0)
    )
    assert d["mesh"] == {
        "data": 1,
        "pipeline": 1,
        "fsdp": 8,
        "context": 1,
        "expert": 1,
        "tensor": 1,
    }
    assert cfg.data.kind == "synthetic" and cfg.run.name == "llama2_7b_training"
    assert report.entries["base_emb_dim"].origin.endswith("models/llama2-7b.yml")
    assert report.by_status("unsupported") == []


def test_device_count_error_names_hosts_and_nnodes(fake_primus):
    exp = experiment(
        fake_primus,
        "hidden_size: 64\ntensor_model_parallel_size: 8\npipeline_model_parallel_size: 8\n",
    )
    with pytest.raises(ConfigError) as err:
        compat.load_foreign(exp, env={}, allow_unsupported=True)
    message = " ".join(str(err.value).split())
    assert "8 devices are not divisible by tensor 8 x pipeline 8 x context 1 = 64" in message
    assert (
        "1 host(s) x 8 devices per host (NNODES=1 (default), GPUS_PER_NODE=8 (default))" in message
    )
    assert (
        "the number of hosts is the launch's node count (srun --nodes, torchrun --nnodes), "
        "read from NNODES as Primus' launcher exports it" in message
    )
    assert "e.g. NNODES=8 with 8 devices per host" in message
    # With the launch's real node count the same file maps.
    cfg, report = compat.load_foreign(
        exp, env={"NNODES": "8", "GPUS_PER_NODE": "8"}, allow_unsupported=True
    )
    assert report.world_size == 64 and cfg.mesh.ici_tensor == 8
