"""Pipeline-parallel configs of the other stacks: Primus' Megatron Llama 3.1 405B (8 nodes) and
DeepSeek-V3 (MI355X), TorchTitan's Llama 4 Maverick, MaxText's ici/dcn_pipeline_parallelism,
virtual stages and schedules. Each resolves with its pipeline size in the mesh, and a shrunk
copy (the family's debug model on 8 fake devices, the same kinds of axes) trains a few steps."""

from __future__ import annotations

import pytest
from ml_collections import ConfigDict

from jaxtrain import compat
from jaxtrain.commands import config as config_report
from jaxtrain.models.presets.registry import model_config
from jaxtrain.parallel import sharding
from jaxtrain.trainer import Trainer

MEGATRON = "Primus/examples/megatron/configs/MI355X/{}-pretrain.yaml"
TITAN = "torchtitan/torchtitan/models/llama4/train_configs/llama4_17bx128e.toml"
BASE_YML = "maxtext/src/maxtext/configs/base.yml"


def _load(samples, path, env, native=()):
    return compat.load_foreign(
        samples / path, env=env, native_overrides=list(native), allow_unsupported=True
    )


def _mesh(cfg) -> dict[str, int]:
    return {k: v for k, v in cfg.mesh.items() if k != "rules" and v != 1}


@pytest.mark.parametrize("name", ["llama3.1_405B-BF16", "llama3.1_405B-FP8"])
def test_primus_llama_405b_on_8_nodes_maps_its_8_stages(compat_samples, name):
    cfg, report = _load(compat_samples, MEGATRON.format(name), {"NNODES": "8"})
    # 64 GPUs: tensor 8 inside each node, the 8 stages one per node, no data parallelism.
    assert _mesh(cfg) == {"ici_tensor": 8, "ici_fsdp": -1, "dcn_pipeline": 8, "dcn_data": -1}
    # 256 micro batches of one sequence per step: 8 per pipeline pass, 32 passes.
    assert (
        cfg.train.micro_batch_size,
        cfg.train.pipeline_microbatches,
        cfg.train.global_batch_size,
    ) == (8, 8, 256)
    assert report.entries["pipeline_model_parallel_size"].status == "mapped"
    figures = config_report.derived(cfg, report.world_size, report.num_hosts)
    assert figures["mesh"]["pipeline"] == 8
    # 126 blocks do not split into 8 equal stages; Megatron refuses the file the same way
    # unless decoder_first/last_pipeline_num_layers make the end stages shorter.
    assert figures["pipeline"].startswith(
        "does not fit: The model.num_layers=126 blocks do not split into the 8 pipeline stages"
    )


@pytest.mark.parametrize("name", ["deepseek_v3-BF16", "deepseek_v3-FP8"])
def test_primus_deepseek_v3_on_mi355x_maps_16_stages_and_expert_parallelism(compat_samples, name):
    cfg, report = _load(compat_samples, MEGATRON.format(name), {"NNODES": "32"})
    assert _mesh(cfg) == {"ici_expert": 8, "ici_fsdp": -1, "dcn_pipeline": 16, "dcn_data": -1}
    # 4096 sequences in micro batches of 2 x 16 data-parallel ranks: 16 per pass.
    assert (cfg.train.micro_batch_size, cfg.train.pipeline_microbatches) == (512, 16)
    layout = report.entries["pipeline_model_parallel_layout"]
    assert layout.status == "ignored" and "equal, contiguous runs" in layout.reason
    figures = config_report.derived(cfg, report.world_size, report.num_hosts)
    assert figures["mesh"]["pipeline"] == 16
    assert (
        "58 expert blocks (model.num_layers=61 less the 3 leading dense blocks"
        in figures["pipeline"]
    )


def test_torchtitan_llama4_maverick_maps_4_stages(compat_samples):
    cfg, report = _load(compat_samples, TITAN, {"NNODES": "4"})
    assert _mesh(cfg) == {"ici_tensor": 8, "ici_fsdp": -1, "dcn_pipeline": 4, "dcn_data": -1}
    assert cfg.model.num_layers == 48 and cfg.model.moe_layer_step == 2
    assert (cfg.train.pipeline_microbatches, cfg.train.pipeline_repeats) == (1, 1)
    figures = config_report.derived(cfg, report.world_size, report.num_hosts)
    assert figures["mesh"]["pipeline"] == 4
    # One sequence per step (the file's local_batch_size 1 on one data-parallel rank) cannot
    # split over the 4 stages, which share the batch outside the stack: the check says so.
    assert figures["pipeline"].startswith("does not fit: The micro batch of 1 sequences")
    cfg, report = _load(compat_samples, TITAN, {"NNODES": "4"}, ["training.local_batch_size=8"])
    figures = config_report.derived(cfg, report.world_size, report.num_hosts)
    # 24 groups of a dense and an expert block, 6 per stage; 4 of the 8 sequences per pass.
    assert figures["pipeline"]["blocks_per_stage"].startswith("6 of the 24 groups")
    assert (figures["pipeline"]["micro_batches"], cfg.train.micro_batch_size) == (4, 4)
    assert report.entries["parallelism.pipeline_parallel_degree"].status == "mapped"


def test_virtual_stages_and_schedules_become_repeats(compat_samples):
    cfg, report = _load(
        compat_samples,
        MEGATRON.format("llama3.1_405B-BF16"),
        {"NNODES": "8"},
        ["num_layers=128", "num_layers_per_virtual_pipeline_stage=4"],
    )
    assert cfg.train.pipeline_repeats == 4  # 128 / (8 stages x 4 layers)
    cfg, _ = _load(
        compat_samples,
        MEGATRON.format("llama3.1_405B-BF16"),
        {"NNODES": "8"},
        ["virtual_pipeline_model_parallel_size=2"],
    )
    assert cfg.train.pipeline_repeats == 2
    cfg, report = _load(
        compat_samples,
        TITAN,
        {"NNODES": "4"},
        ["parallelism.pipeline_parallel_schedule=Interleaved1F1B"],
    )
    assert cfg.train.pipeline_repeats == 2
    # MaxText: ici_pipeline_parallelism and its repeats default (blocks / stages).
    cfg, report = _load(
        compat_samples,
        BASE_YML,
        {},
        [
            "model_name=llama2-7b",
            "ici_pipeline_parallelism=4",
            "ici_fsdp_parallelism=-1",
            "num_pipeline_microbatches=8",
        ],
    )
    assert (cfg.mesh.ici_pipeline, cfg.train.pipeline_microbatches, cfg.train.pipeline_repeats) == (
        4,
        8,
        8,
    )
    assert report.entries["ici_pipeline_parallelism"].status == "mapped"


# Shrunk copies: the family's debug model (blocks that split into the stages), the file's
# kinds of mesh axes on 8 devices, a tiny batch.
SHRINK = [
    (
        MEGATRON.format("llama3.1_405B-BF16"),
        {"NNODES": "8"},
        "llama3-debug",
        dict(num_layers=8),
        dict(ici_pipeline=4, ici_tensor=2),
    ),
    (
        MEGATRON.format("deepseek_v3-BF16"),
        {"NNODES": "32"},
        "deepseek-v3-debug",
        dict(num_layers=5, num_dense_layers=1),
        dict(ici_pipeline=2, ici_expert=4),
    ),
    (
        TITAN,
        {"NNODES": "4"},
        "llama4-debug",
        dict(num_layers=8),
        dict(ici_pipeline=4, ici_tensor=2),
    ),
]


def _shrunk(cfg: ConfigDict, tmp_path, preset: str, model: dict, mesh: dict) -> ConfigDict:
    cfg = ConfigDict(cfg.to_dict())
    debug = model_config(preset, **model)
    for key in cfg.model:
        cfg.model[key] = debug[key]
    for key in list(cfg.mesh):
        if key != "rules":
            cfg.mesh[key] = mesh.get(key, 1)
    cfg.train.update(
        steps=2,
        seq_len=16,
        global_batch_size=16,
        micro_batch_size=8,
        pipeline_microbatches=0,
        eval_every=0,
        eval_batches=0,
        progress=False,
    )
    cfg.data.kind = "synthetic"
    cfg.run.dir = str(tmp_path / "run")
    cfg.checkpoint.dir = ""
    cfg.checkpoint.every = 0
    return cfg


@pytest.mark.slow
@pytest.mark.parametrize(
    "path, env, preset, model, mesh",
    SHRINK,
    ids=["llama3.1_405B", "deepseek_v3", "llama4_17bx128e"],
)
def test_shrunk_copy_trains_on_fake_devices(
    compat_samples, tmp_path, path, env, preset, model, mesh
):
    cfg, _ = _load(compat_samples, path, env)
    trainer = Trainer(_shrunk(cfg, tmp_path, preset, model, mesh), console=False)
    try:
        assert sharding.mesh_shape(trainer.mesh)["pipeline"] == mesh["ici_pipeline"]
        metrics = trainer.run()
    finally:
        trainer.close()
    assert trainer.step == 2 and metrics["loss"] > 0
