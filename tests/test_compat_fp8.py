"""Primus' FP8 examples (Megatron, TorchTitan and MaxText on MI300X/MI325X/MI355X) resolve to
fp8 runs without any fp8 key refused, and a shrunk one trains."""

from __future__ import annotations

import math

import jax
import pytest
from conftest import COMPAT_SAMPLES

from jaxtrain import compat
from jaxtrain.errors import ConfigError
from jaxtrain.trainer import Trainer

FP8_FILES = sorted(
    p.relative_to(COMPAT_SAMPLES).as_posix()
    for p in (COMPAT_SAMPLES / "Primus" / "examples").glob("*/configs/MI*/*[Ff][Pp]8-pretrain.yaml")
)
# Architectures the zoo does not build: refused by name, as their BF16 files are.
NOT_IN_ZOO = {
    "gemma4_26B": "decoder_block='gemma4'",
    "gemma4_31B": "decoder_block='gemma4'",
    "deepseek_v4_flash": "model_type='deepseek_v4'",
    "lfm2_8B_A1B": "lfm_layer_types=",
}
# Source keys about low-precision training: none of these may be refused.
FP8_WORDS = (
    "fp8",
    "float8",
    "quantiz",
    "amax",
    "mxfp",
    "delayed_scaling",
    "layers_bf16",
    "converters",
)


def _resolve(rel: str):
    """The file resolved for the smallest launch its parallelism fits (1, 8 or 16 nodes)."""
    for nodes in ("1", "8", "16"):
        try:
            return compat.load_foreign(
                COMPAT_SAMPLES / rel,
                env={"NNODES": nodes, "GPUS_PER_NODE": "8"},
                allow_unsupported=True,
            )
        except ConfigError as error:
            if "devices" not in str(error) and "hold together" not in str(error):
                raise
    raise AssertionError(f"{rel} fits no launch of up to 16 nodes")


def test_every_fp8_example_is_here():
    frameworks = {rel.split("/")[2] for rel in FP8_FILES}
    assert frameworks == {"megatron", "torchtitan", "maxtext"} and len(FP8_FILES) >= 150


@pytest.mark.parametrize("rel", FP8_FILES)
def test_fp8_examples_resolve_to_fp8_runs(rel):
    model = rel.rsplit("/", 1)[1].split("-")[0]
    if model in NOT_IN_ZOO:
        with pytest.raises(ConfigError, match=NOT_IN_ZOO[model]):
            _resolve(rel)
        return
    cfg, report = _resolve(rel)
    refused = [
        e.key
        for e in report.by_status("unsupported")
        if any(word in e.key.lower() for word in FP8_WORDS) or "fp8" in e.reason
    ]
    assert refused == [], refused
    assert cfg.model.quantization == "fp8"
    framework = rel.split("/")[2]
    expected = {"megatron": "delayed", "maxtext": "delayed", "torchtitan": "current"}[framework]
    if framework == "megatron" and report.entries["fp8_recipe"].value == "tensorwise":
        expected = "current"  # Primus' default is delayed; a few files ask for tensorwise
    assert cfg.model.fp8_recipe == expected
    if framework == "maxtext":  # Flax's fp8 ops: 1024 steps of history, never the logits
        assert (cfg.model.fp8_amax_history, cfg.model.fp8_output_layer) == (1024, False)


def test_torchtitan_float8_follows_filter_fqns_and_the_moe_switch():
    titan = "Primus/examples/torchtitan/configs/MI300X/{}-FP8-pretrain.yaml"
    cfg, report = _resolve(titan.format("llama3.1_8B"))
    assert not cfg.model.fp8_output_layer  # filter_fqns: ["output"]
    assert report.entries["quantize.linear.float8.filter_fqns"].status == "mapped"
    cfg, report = _resolve(titan.format("gpt_oss_20B"))
    # No filter: TorchTitan converts the output layer too; use_moe_fp8 off: bf16 experts.
    assert cfg.model.fp8_output_layer and not cfg.model.fp8_experts
    assert report.entries["primus_turbo.use_moe_fp8"].target == "model.fp8_experts"
    cfg, _ = _resolve(titan.format("deepseek_v3_16b"))
    assert cfg.model.fp8_experts  # use_moe_fp8: true


MOE_SHRINK = [
    "num_layers=2",
    "hidden_size=64",
    "ffn_hidden_size=128",
    "num_attention_heads=4",
    "num_query_groups=2",
    "seq_length=32",
    "max_position_embeddings=32",
    "global_batch_size=8",
    "micro_batch_size=1",
    "train_iters=3",
    "num_experts=4",
    "moe_router_topk=2",
    "moe_ffn_hidden_size=32",
]


@pytest.mark.slow
def test_a_shrunk_primus_fp8_mixture_of_experts_trains(tmp_path):
    cfg, report = compat.load_foreign(
        COMPAT_SAMPLES / "Primus/examples/megatron/configs/MI300X/"
        "mixtral_8x7B_v0.1-FP8-pretrain.yaml",
        {"run.dir": str(tmp_path / "run"), "train.progress": False, "mesh.ici_expert": 1},
        env={},
        native_overrides=MOE_SHRINK,
    )
    assert report.by_status("unsupported") == []
    assert (cfg.model.quantization, cfg.model.num_experts, cfg.model.dtype) == (
        "fp8",
        4,
        "bfloat16",
    )
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    try:
        trainer.run()
        amax = jax.device_get(trainer.state["params"]["layers"]["mlp"]["gate_proj_fp8_amax"])
    finally:
        trainer.close()
    assert trainer.step == 3 and all(math.isfinite(h["loss"]) for h in trainer.history)
    assert (amax[:, :, :3] > 0).all()  # the experts' amax history after three steps
