"""Foreign configs train: the Primus Megatron llama2 example shrunk to a tiny model, and the
prime-rl pretrain sample pointed at local datatrove shards and a local model folder."""

import json
import math
import shutil

import jax
import pytest

from jaxtrain import compat
from jaxtrain.interop.hf_config import hf_config_from_spec
from jaxtrain.models.presets.registry import model_spec
from jaxtrain.trainer import Trainer

LLAMA2 = "Primus/examples/megatron/configs/MI300X/llama2_7B-BF16-pretrain.yaml"
SHRINK = [
    "num_layers=2",
    "hidden_size=64",
    "ffn_hidden_size=128",
    "num_attention_heads=4",
    "seq_length=32",
    "max_position_embeddings=32",
    "global_batch_size=8",
    "micro_batch_size=1",
    "train_iters=3",
]


def train(cfg):
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    try:
        trainer.run()
        return trainer.step, trainer.history
    finally:
        trainer.close()


def test_primus_megatron_llama2_trains_three_steps(compat_samples, tmp_path):
    cfg, report = compat.load_foreign(
        compat_samples / LLAMA2,
        {"run.dir": str(tmp_path / "run"), "train.progress": False},
        env={},
        native_overrides=SHRINK,
    )
    assert (cfg.model.hidden_size, cfg.model.vocab_size, cfg.data.kind) == (64, 32000, "synthetic")
    assert cfg.train.micro_batch_size == 8  # micro_batch_size 1 x 8 data-parallel ranks
    step, history = train(cfg)
    assert step == 3 and all(math.isfinite(h["loss"]) for h in history)
    # Megatron's warmup (lr_warmup_iters=2) runs its first iteration at lr_warmup_init = 0.
    assert [h["lr"] for h in history] == pytest.approx([0.0, 5e-6, 1e-5])


def test_prime_rl_pretrain_trains_on_local_shards(compat_samples, tmp_path, datatrove_corpus):
    model_dir = tmp_path / "tiny-qwen3"
    model_dir.mkdir()
    spec = model_spec("qwen3-debug", vocab_size=400)
    (model_dir / "config.json").write_text(json.dumps(hf_config_from_spec(spec)))
    for item in datatrove_corpus.tokenizer.iterdir():
        shutil.copy(item, model_dir / item.name)
    shards = str(datatrove_corpus.folder)
    native = [
        f"model.name={model_dir}",
        f"data.paths=['{shards}']",
        f"val.data.paths=['{shards}']",
        "max_steps=4",
        "data.seq_len=32",
        "val.data.seq_len=32",
        "data.batch_size=8",
        "data.micro_batch_size=1",
        "val.interval=2",
        "val.num_samples=16",
        "ckpt.interval=2",
    ]
    cfg, report = compat.load_foreign(
        compat_samples / "prime-hosted" / "pretrain.toml",
        {"run.dir": str(tmp_path / "run"), "train.progress": False},
        env={},
        native_overrides=native,
    )
    assert report.entries["model.name"].reason.startswith("architecture from")
    assert (cfg.model.vocab_size, cfg.model.qk_norm, cfg.data.tokenizer) == (
        400,
        True,
        str(model_dir),
    )
    assert (cfg.train.eval_every, cfg.train.eval_batches) == (2, 2)  # 16 samples / batch 8
    assert cfg.train.micro_batch_size == 8  # 1 per GPU x the sample's 8 GPUs
    step, history = train(cfg)
    assert step == 4
    assert [h["step"] for h in history if "val_loss" in h] == [2, 4]
    assert all(math.isfinite(h["loss"]) for h in history)
    assert sorted(
        p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.isdigit()
    ) == ["2", "4"]


def test_primus_megatron_llama2_trains_on_megatron_shards(compat_samples, tmp_path):
    import numpy as np
    from data_fixtures import write_raw_megatron

    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 32000, int(n)).tolist() for n in rng.integers(20, 120, 200)]
    prefix = write_raw_megatron(tmp_path / "corpus" / "text_document", docs, code=8)
    cfg, report = compat.load_foreign(
        compat_samples / LLAMA2,
        {"run.dir": str(tmp_path / "run"), "train.progress": False},
        env={},
        native_overrides=[*SHRINK, "mock_data=false", f"data_path=1.0 {prefix}", "split=90,10,0"],
    )
    assert cfg.data.kind == "megatron"
    assert str(prefix) in cfg.data.paths
    step, history = train(cfg)
    assert step == 3 and all(math.isfinite(h["loss"]) for h in history)


MOE_SHRINK = [
    *SHRINK,
    "num_experts=4",
    "moe_router_topk=2",
    "moe_ffn_hidden_size=32",
    "train_iters=2",
]


def test_primus_megatron_mixtral_trains_two_steps(compat_samples, tmp_path):
    cfg, report = compat.load_foreign(
        compat_samples / "Primus/examples/megatron/configs/MI300X/"
        "mixtral_8x7B_v0.1-BF16-pretrain.yaml",
        {"run.dir": str(tmp_path / "run"), "train.progress": False, "mesh.ici_expert": 1},
        env={},
        native_overrides=[*MOE_SHRINK, "num_query_groups=2"],
    )
    assert (cfg.model.num_experts, cfg.model.moe_intermediate_size) == (4, 32)
    step, history = train(cfg)
    assert step == 2 and all(math.isfinite(h["loss"]) for h in history)


def test_primus_megatron_deepseek_v2_lite_mla_trains_two_steps(compat_samples, tmp_path):
    # MLA switched back on, with YaRN from the preset; the balancing loss made micro-batch wide;
    # one device, so no expert parallelism (the example asks for 8).
    cfg, report = compat.load_foreign(
        compat_samples / "Primus/examples/megatron/configs/MI300X/"
        "deepseek_v2_lite-BF16-pretrain.yaml",
        {
            "run.dir": str(tmp_path / "run"),
            "train.progress": False,
            "model.vocab_size": 512,
            "mesh.ici_expert": 1,
        },
        env={},
        native_overrides=[
            *MOE_SHRINK,
            "multi_latent_attention=true",
            "kv_lora_rank=32",
            "q_lora_rank=24",
            "qk_head_dim=16",
            "qk_pos_emb_head_dim=8",
            "v_head_dim=16",
            "moe_shared_expert_intermediate_size=32",
            "moe_layer_freq=([0]*1+[1]*1)",
            "moe_router_load_balancing_type=aux_loss",
            "original_max_position_embeddings=16",
        ],
    )
    m = cfg.model
    assert (m.kv_lora_rank, m.rope_scaling, m.num_dense_layers, m.moe_shared_experts) == (
        32,
        "yarn",
        1,
        1,
    )
    step, history = train(cfg)
    assert step == 2 and all(math.isfinite(h["loss"]) for h in history)


@pytest.mark.parametrize("name", ["grok1", "grok2"])
def test_primus_megatron_grok_trains_two_steps(compat_samples, tmp_path, name):
    # The FP8 example with fp8 and pipeline stages off (bf16 compute, one CPU device); grok2
    # keeps Primus' output and router soft-caps.
    cfg, report = compat.load_foreign(
        compat_samples / f"Primus/examples/megatron/configs/MI300X/{name}-FP8-pretrain.yaml",
        {
            "run.dir": str(tmp_path / "run"),
            "train.progress": False,
            "mesh.ici_expert": 1,
            "model.vocab_size": 512,
        },
        env={},
        native_overrides=[
            *MOE_SHRINK,
            "num_query_groups=2",
            "fp8=null",
            "pipeline_model_parallel_size=1",
            "num_virtual_stages_per_pipeline_rank=null",
        ],
    )
    assert (cfg.model.family, cfg.model.num_experts) == ("grok", 4)
    assert cfg.model.final_logit_softcap == (50.0 if name == "grok2" else 0.0)
    step, history = train(cfg)
    assert step == 2 and all(math.isfinite(h["loss"]) for h in history)


def test_primus_megatron_mamba_370m_trains_three_steps(compat_samples, tmp_path):
    cfg, report = compat.load_foreign(
        compat_samples / "Primus/examples/megatron/configs/MI300X/mamba_370M-pretrain.yaml",
        {"run.dir": str(tmp_path / "run"), "train.progress": False, "model.ssm_chunk_size": 8},
        env={},
        native_overrides=[
            "num_layers=2",
            "hidden_size=64",
            "mamba_state_dim=8",
            "mamba_head_dim=16",
            "mamba_num_groups=2",
            "seq_length=32",
            "max_position_embeddings=32",
            "global_batch_size=8",
            "micro_batch_size=1",
            "train_iters=3",
            "lr_warmup_iters=0",
        ],
    )
    assert (cfg.model.family, cfg.model.block_pattern, cfg.model.ssm_n_groups) == (
        "mamba2",
        "MM",
        2,
    )
    step, history = train(cfg)
    assert step == 3 and all(math.isfinite(h["loss"]) for h in history)


ZEBRA = "Primus/examples/megatron/configs/MI300X/zebra_llama_{}-pretrain.yaml"
ZEBRA_SHRINK = [
    "num_layers=4",
    "hidden_size=64",
    "ffn_hidden_size=128",
    "linear_num_key_heads=2",
    "linear_num_value_heads=4",
    "linear_key_head_dim=16",
    "linear_value_head_dim=16",
    "mamba_state_dim=8",
    "mamba_head_dim=16",
    "mamba_num_groups=2",
    "num_attention_heads=4",
    "q_lora_rank=32",
    "kv_lora_rank=16",
    "qk_head_dim=16",
    "qk_pos_emb_head_dim=8",
    "v_head_dim=16",
    "seq_length=32",
    "max_position_embeddings=32",
    "global_batch_size=8",
    "micro_batch_size=1",
    "train_iters=2",
    "lr_warmup_iters=0",
    "save=null",  # the files save under ./output
]


@pytest.mark.parametrize(
    "name, pattern",
    [
        ("300M_gdn_pure", "G-G-"),
        ("300M_kda_pure", "K-K-"),
        ("300M_gdn_hybrid", "*-G-"),
        ("300M_mamba_hybrid", "*-M-"),
    ],
)
def test_primus_zebra_llama_trains_two_steps(compat_samples, tmp_path, name, pattern):
    # Each block kind of Zebra-Llama, shrunk: pure GDN, pure KDA, and GDN / Mamba-2 with MLA.
    overrides = ZEBRA_SHRINK + (["hybrid_override_pattern=" + pattern] if "*" in pattern else [])
    cfg, _ = compat.load_foreign(
        compat_samples / ZEBRA.format(name),
        {
            "run.dir": str(tmp_path / "run"),
            "train.progress": False,
            "model.ssm_chunk_size": 8,
            "model.linear_chunk": 8,
        },
        env={},
        native_overrides=overrides,
    )
    assert (cfg.model.family, cfg.model.block_pattern) == ("zebra_llama", pattern)
    step, history = train(cfg)
    assert step == 2 and all(math.isfinite(h["loss"]) for h in history)
