"""Native TorchTitan TOMLs, prime-rl pretrain TOMLs, Hugging Face config.json, format detection
and the `config` command's report, checked against values read from the files by hand."""

import json

import pytest
from conftest import REPO

from jaxtrain import compat
from jaxtrain.cli import main
from jaxtrain.commands import config as config_report
from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_config import hf_config_from_spec
from jaxtrain.models.presets.registry import model_spec

TITAN = "torchtitan/torchtitan/models/{}/train_configs/{}"


def derived(cfg, report):
    return config_report.derived(cfg, report.world_size, report.num_hosts)


def test_every_sample_resolves_or_fails_clearly(compat_samples):
    """Each sample maps with only the unsupported keys its content explains."""
    expected = {
        "llama3/train_configs/llama3_8b.toml": {"training.dataset"},
        "qwen3/train_configs/qwen3_0.6b.toml": {"training.dataset"},
        "deepseek_v3/train_configs/deepseek_v3_16b.toml": {"training.dataset"},
        "deepseek_v3/train_configs/deepseek_v3_671b.toml": {"training.dataset"},
        "deepseek_v3/train_configs/debug_model.toml": {"training.dataset"},
        "llama4/train_configs/llama4_17bx16e.toml": {"training.dataset"},
        "gpt_oss/train_configs/debug_model.toml": {"training.dataset"},
        "qwen3/train_configs/qwen3_moe_debug.toml": {"training.dataset"},
        "prime-hosted/pretrain.toml": set(),
    }
    for path in sorted(compat_samples.rglob("*.toml")):
        rel = str(path.relative_to(compat_samples))
        if rel.startswith("prime-rl/"):
            with pytest.raises(ConfigError, match="only prime-rl pretraining files"):
                compat.load_foreign(path, env={})
            continue
        if rel.startswith("torchtitan/torchtitan/models/flux/"):  # see test_compat_families
            with pytest.raises(ConfigError, match="model zoo cannot build"):
                compat.load_foreign(path, env={})
            continue
        if rel.endswith("llama4_17bx128e.toml"):  # tensor 8 x pipeline 4: test_compat_pipeline
            with pytest.raises(
                ConfigError,
                match=r"8 devices are not divisible by .*tensor 8 "
                r"x context 1 x pipeline 4 = 32",
            ):
                compat.load_foreign(path, env={})
            continue
        _, report = compat.load_foreign(path, env={}, allow_unsupported=True)
        key = next(k for k in expected if rel.endswith(k))
        assert {e.key for e in report.by_status("unsupported")} == expected[key], rel
        assert set(report.entries) >= set(report.values), rel  # every key is accounted for


def test_torchtitan_llama3_8b_toml(compat_samples):
    path = compat_samples / TITAN.format("llama3", "llama3_8b.toml")
    cfg, report = compat.load_foreign(path, {"data.kind": "datatrove", "data.paths": "x"}, env={})
    assert cfg.model.preset == "llama3.1-8b" and cfg.model.max_seq_len == 8192
    assert derived(cfg, report)["num_params"] == 8_030_261_248
    # local_batch_size 1 x 8 ranks; JobConfig defaults: linear decay to 0, weight decay 0.1.
    assert (
        cfg.train.micro_batch_size,
        cfg.train.global_batch_size,
        cfg.train.seq_len,
        cfg.train.steps,
    ) == (8, 8, 8192, 1000)
    o = cfg.optim
    assert (o.lr, o.warmup_steps, o.schedule, o.min_lr, o.weight_decay, o.eps) == (
        3e-4,
        200,
        "linear",
        0.0,
        0.1,
        1e-8,
    )
    assert cfg.model.remat == "dots" and cfg.run.dir == "./outputs"  # selective AC
    assert report.entries["optimizer.weight_decay"].origin == "torchtitan default"
    assert report.entries["profiling.enable_profiling"].status == "ignored"


def test_torchtitan_qwen3_toml_and_bad_model(compat_samples, tmp_path):
    path = compat_samples / TITAN.format("qwen3", "qwen3_0.6b.toml")
    cfg, report = compat.load_foreign(path, env={}, allow_unsupported=True)
    assert cfg.model.preset == "qwen3-0.6b" and cfg.model.tie_embeddings
    assert (cfg.train.steps, cfg.optim.warmup_steps, cfg.train.micro_batch_size) == (10, 2, 32)
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nname = "llama3"\nflavor = "7B"\n[training]\nsteps = 2\n')
    with pytest.raises(
        ConfigError,
        match=r"bad\.toml: model\.flavor='7B' is not a llama3 "
        r"flavour",
    ):
        compat.load_foreign(bad, env={})
    bad.write_text('[model]\nname = "gemma"\nflavor = "2B"\n[training]\nsteps = 2\n')
    with pytest.raises(ConfigError, match=r"bad\.toml: model\.name='gemma'"):
        compat.load_foreign(bad, env={})
    bad.write_text('[model]\nname = "llama3"\nflavor = \n')
    with pytest.raises(ConfigError, match=r"bad\.toml: TOML syntax error: .*line 3"):
        compat.load_foreign(bad, env={})


def test_torchtitan_device_count_error_names_hosts_and_process_count(tmp_path):
    path = tmp_path / "tp16.toml"
    path.write_text(
        '[model]\nname = "llama3"\nflavor = "debugmodel"\n[training]\nsteps = 2\n'
        "[parallelism]\ntensor_parallel_degree = 16\n"
    )
    with pytest.raises(ConfigError) as err:
        compat.load_foreign(path, env={"NNODES": "1", "GPUS_PER_NODE": "8"})
    message = " ".join(str(err.value).split())
    assert (
        "8 devices are not divisible by replicate 1 x tensor 16 x context 1 x pipeline 1" in message
    )
    assert "1 host(s) x 8 devices per host (NNODES=1, GPUS_PER_NODE=8)" in message
    assert "torchrun --nnodes" in message and "WORLD_SIZE to the device count" in message
    assert "e.g. NNODES=2 with 8 devices per host" in message


def test_prime_rl_pretrain_sample(compat_samples):
    cfg, report = compat.load_foreign(compat_samples / "prime-hosted" / "pretrain.toml", env={})
    assert cfg.model.preset == "qwen3-0.6b"  # PrimeIntellect/Qwen3-0.6B-... -> offline table
    assert any("offline table" in n for n in report.notes)
    # batch 64 sequences, 2 per GPU x 8 GPUs per pass: 4 accumulation steps.
    assert (
        cfg.train.global_batch_size,
        cfg.train.micro_batch_size,
        cfg.train.seq_len,
        cfg.train.steps,
    ) == (64, 16, 1024, 300)
    assert derived(cfg, report)["grad_accumulation_steps"] == 4
    assert (cfg.data.kind, cfg.data.paths, cfg.data.val_paths) == (
        "datatrove",
        "datasets/tinystories/train",
        "datasets/tinystories/val",
    )
    assert (cfg.train.eval_every, cfg.train.eval_batches, cfg.checkpoint.every) == (50, 1, 50)
    o = cfg.optim
    assert (o.lr, o.warmup_steps, o.schedule, o.warmup_offset) == (1e-3, 10, "constant", 0)
    assert (o.weight_decay, o.b1, o.b2, o.clip_grad_norm) == (0.01, 0.9, 0.999, 1.0)
    assert report.by_status("unsupported") == []


def test_prime_rl_rejects_online_eval_sections(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(
        'mode = "pretrain"\nmax_steps = 3\n[model]\nname = "Qwen/Qwen3-0.6B"\n'
        '[data]\npaths = ["d"]\n[inference]\n'
    )
    with pytest.raises(ConfigError, match=r"p\.toml: \[inference\] is not allowed with mode"):
        compat.load_foreign(path, env={})
    path.write_text(
        'mode = "pretrain"\nmax_steps = 3\n[model]\nname = "org/Unknown-7B"\n'
        '[data]\npaths = ["d"]\n'
    )
    with pytest.raises(ConfigError, match="model.name='org/Unknown-7B' has no config.json"):
        compat.load_foreign(path, env={})


def test_hf_config_json(tmp_path):
    spec = model_spec("qwen3-debug")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf_config_from_spec(spec, extra={"eos_token_id": 5})))
    cfg = compat.load_config_file(str(path), {"train.steps": 2})
    assert (cfg.model.hidden_size, cfg.model.num_layers, cfg.model.qk_norm) == (64, 2, True)
    assert cfg.model.preset == "qwen3-debug" and cfg.train.steps == 2
    _, report = compat.load_foreign(path, env={})
    assert report.entries["num_hidden_layers"].target == "model.num_layers"
    assert report.entries["eos_token_id"].status == "ignored"
    path.write_text('{"hidden_size": 4}')
    with pytest.raises(ConfigError, match="must be a Hugging Face config.json"):
        compat.load_foreign(path, env={})


@pytest.mark.parametrize(
    "preset, changes, key, target",
    [
        (
            "llama-debug",
            dict(qkv_bias=True, o_bias=True, mlp_bias=True),
            "mlp_bias",
            "model.mlp_bias",
        ),
        (
            "qwen2-debug",
            dict(sliding_window=8, leading_global_layers=1),
            "max_window_layers",
            "model.leading_global_layers",
        ),
        ("qwen3-moe-debug", dict(moe_layer_step=2), "decoder_sparse_step", "model.moe_layer_step"),
        (
            "qwen3-moe-debug",
            dict(num_dense_layers=1),
            "mlp_only_layers",
            "model.num_dense_layers, model.moe_layer_step",
        ),
    ],
)
def test_hf_config_json_variants_map(tmp_path, preset, changes, key, target):
    """Biases, per-layer windows and mixed dense / expert layers are mapped, not refused."""
    spec = model_spec(preset, **changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf_config_from_spec(spec)))
    cfg, report = compat.load_foreign(path, env={})
    assert {k: cfg.model[k] for k in changes} == changes
    assert (report.entries[key].status, report.entries[key].target) == ("mapped", target)


def test_unrecognised_files(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("learning_rate_foo: 1\n")
    with pytest.raises(ConfigError, match="neither a Primus experiment"):
        compat.load_foreign(path, env={})
    path = tmp_path / "x.toml"
    path.write_text("[something]\na = 1\n")
    with pytest.raises(ConfigError, match="cannot tell whether this TOML"):
        compat.load_foreign(path, env={})


def test_config_command_prints_report_json(compat_samples, capsys, monkeypatch):
    for var in ("NNODES", "GPUS_PER_NODE", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    path = compat_samples / "Primus/examples/megatron/configs/MI300X/llama2_7B-FP8-pretrain.yaml"
    argv = [
        "config",
        str(path),
        "--json",
        "num_layers=2",
        "fp8_recipe=blockwise",
        "--config.train.steps=7",
    ]
    assert main(argv + ["--allow-unsupported"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["config"]["train"]["steps"] == 7
    assert payload["config"]["model"]["num_layers"] == 2
    assert payload["derived"]["tokens_per_step"] == 256 * 4096
    assert payload["derived"]["mesh"]["fsdp"] == 8
    keys = {k["key"]: k for k in payload["report"]["keys"]}
    assert keys["fp8"]["status"] == "mapped"
    assert keys["fp8_recipe"]["status"] == "unsupported"
    assert keys["num_layers"]["origin"] == "command line"
    # Without --allow-unsupported the same report, and the unsupported key listed apart.
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [e["key"] for e in payload["unsupported"]] == ["fp8_recipe"]
    assert payload["unsupported"][0]["value"] == "blockwise"


def test_config_command_reports_unsupported_keys_and_exits_0(tmp_path, capsys):
    path = tmp_path / "titan.toml"
    path.write_text(
        '[model]\nname = "llama3"\nflavor = "debugmodel"\n\n[training]\n'
        'local_batch_size = 2\nseq_len = 64\nsteps = 10\ndataset = "c4"\n'
    )
    assert main(["config", str(path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [e["key"] for e in payload["unsupported"]] == ["training.dataset"]
    assert "Hugging Face datasets are not read" in payload["unsupported"][0]["reason"]
    statuses = {k["key"]: k["status"] for k in payload["report"]["keys"]}
    assert statuses["training.dataset"] == "unsupported"
    assert payload["config"]["train"]["seq_len"] == 64
    assert main(["config", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "# 1 unsupported key(s) (listed first above): training refuses this config unless "
        "--allow-unsupported." in out
    )
    assert "unsupported training.dataset" in " ".join(out.split())
    # Training is what refuses them.
    assert main(["--config", str(path)]) == 2
    assert "1 unsupported key(s): training.dataset='c4'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("config", "total", "active"),
    [
        ("mixtral_8x7b.py", 46.70e9, 12.88e9),
        ("qwen3_30b_a3b.py", 30.53e9, 3.35e9),
        ("deepseek_v3.py", 671.0e9, 37.55e9),
        ("llama2_7b.py", 6.738e9, 6.738e9),
    ],
)
def test_config_command_counts_active_parameters(capsys, config, total, active):
    assert main(["config", str(REPO / "configs" / config), "--json"]) == 0
    derived = json.loads(capsys.readouterr().out)["derived"]
    assert derived["num_params"] == pytest.approx(total, rel=0.01)
    assert derived["num_active_params"] == pytest.approx(active, rel=0.01)


def test_train_command_refuses_unsupported_keys(compat_samples, capsys):
    path = compat_samples / "Primus/examples/megatron/configs/MI300X/llama2_7B-FP8-pretrain.yaml"
    assert main(["--config", str(path), "train_iters=1", "fp8_recipe=mxfp8"]) == 2
    assert "pass --allow-unsupported" in capsys.readouterr().err


def test_maxtext_yaml_with_base_config_and_model_file(compat_samples, tmp_path):
    path = tmp_path / "mine.yml"
    path.write_text(
        "base_config: base.yml\nmodel_name: llama2-7b\nrun_name: mine\n"
        "dataset_type: synthetic\nsteps: 20\nper_device_batch_size: 0.5\n"
        "max_target_length: 1024\nici_tensor_parallelism: 2\n"
    )
    root = compat_samples / "maxtext"
    cfg, report = compat.load_foreign(
        path, env={"NNODES": "1", "GPUS_PER_NODE": "8"}, maxtext_root=str(root)
    )
    assert cfg.model.preset == "llama2-7b" and cfg.model.max_seq_len == 1024
    assert (cfg.train.global_batch_size, cfg.train.steps) == (4, 20)  # 0.5 x 8 devices
    assert derived(cfg, report)["mesh"] == {
        "data": 1,
        "pipeline": 1,
        "fsdp": 4,
        "context": 1,
        "expert": 1,
        "tensor": 2,
    }
    assert report.entries["learning_rate"].origin.endswith("base.yml")
    assert report.entries["learning_rate"].status == "mapped"
    # MaxText refuses a command-line value that contradicts the model file unless
    # override_model_config is set; with it, the command line wins.
    with pytest.raises(ConfigError, match=r"\['base_num_decoder_layers'\] are set both"):
        compat.load_foreign(
            path, env={}, maxtext_root=str(root), native_overrides=["base_num_decoder_layers=2"]
        )
    cfg, _ = compat.load_foreign(
        path,
        env={},
        maxtext_root=str(root),
        native_overrides=["base_num_decoder_layers=2", "override_model_config=true"],
    )
    assert cfg.model.num_layers == 2


def test_maxtext_vocab_tiling_becomes_loss_chunks(compat_samples, tmp_path):
    root = compat_samples / "maxtext"
    path = tmp_path / "tiled.yml"
    path.write_text(
        "base_config: base.yml\nmodel_name: llama2-7b\ndataset_type: synthetic\n"
        "steps: 2\nper_device_batch_size: 1\nmax_target_length: 1024\n"
    )
    cfg, report = compat.load_foreign(
        path, env={}, maxtext_root=str(root), native_overrides=["num_vocab_tiling=4"]
    )
    assert cfg.train.loss_chunks == 4
    assert report.entries["num_vocab_tiling"].status == "mapped"
    cfg, report = compat.load_foreign(path, env={}, maxtext_root=str(root))
    assert cfg.train.loss_chunks == 0  # base.yml's 1: the logits at once
    _, report = compat.load_foreign(
        path,
        env={},
        maxtext_root=str(root),
        allow_unsupported=True,
        native_overrides=["num_vocab_tiling=3"],
    )
    entry = report.entries["num_vocab_tiling"]
    assert entry.status == "unsupported" and "max_target_length=1024" in entry.reason
