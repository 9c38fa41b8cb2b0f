"""Memory planning: per-device state arithmetic, `config --devices`, and the trainer's refusal
to start a step that cannot fit, before anything is allocated."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from conftest import REPO
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtrain.config import loader as config_lib
from jaxtrain.planning import memory as memory_plan
from jaxtrain.planning.memory import MemoryPlanError
from jaxtrain.train import state as state_lib
from jaxtrain.trainer import Trainer

GIB = 2**30


def test_shard_bytes_split_each_dimension_over_its_mesh_axes():
    mesh = Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tensor"))
    leaf = jax.ShapeDtypeStruct(
        (1024, 60), np.float32, sharding=NamedSharding(mesh, PartitionSpec("fsdp", "tensor"))
    )
    assert memory_plan.shard_bytes(leaf, {"fsdp": 8, "tensor": 2}) == 128 * 30 * 4
    assert memory_plan.shard_bytes(leaf, {"fsdp": 8, "tensor": 7}) == 128 * 9 * 4  # padded
    both = jax.ShapeDtypeStruct(
        (64, 8), np.int32, sharding=NamedSharding(mesh, PartitionSpec(("fsdp", "tensor"), None))
    )
    assert memory_plan.shard_bytes(both, {"fsdp": 4, "tensor": 2}) == 8 * 8 * 4


def debug_config(tmp_path, **overrides):
    values = {
        "run.dir": str(tmp_path / "run"),
        "train.seq_len": 32,
        "train.global_batch_size": 8,
        "train.steps": 2,
        "train.progress": False,
        "train.eval_batches": 0,
    }
    values.update(overrides)
    return config_lib.load_config(str(REPO / "configs" / "llama_debug.py"), values)


def refuse_allocation(monkeypatch):
    def allocated(*args, **kwargs):
        raise AssertionError("the state was allocated before the memory check")

    monkeypatch.setattr(state_lib, "init_state", allocated)


def test_a_state_too_large_for_the_devices_is_refused_before_compiling(tmp_path, monkeypatch):
    refuse_allocation(monkeypatch)
    monkeypatch.setattr(memory_plan, "device_capacity", lambda devices: (100e3, "a test limit"))
    with pytest.raises(MemoryPlanError) as error:
        Trainer(debug_config(tmp_path), devices=jax.devices()[:1], console=False)
    message = str(error.value)
    assert message.startswith("the train state alone (before activations) needs ")
    assert "per device but a device has 97.7 KiB" not in message  # sizes print as MiB/GiB
    assert "(a test limit); mesh 1 device. Per device: optimizer state " in message
    assert "Nothing was allocated" in message
    assert "mesh.ici_fsdp" in message and "train.check_memory=false" in message


def test_activations_that_do_not_fit_are_refused_after_compiling(tmp_path, monkeypatch):
    cfg = debug_config(
        tmp_path, **{"train.global_batch_size": 64, "train.seq_len": 256, "model.remat": "none"}
    )
    plan, sizes = memory_plan.plan_for_mesh(cfg, 1)
    # Room for the state and the batch, not for the step's scratch.
    limit = plan.state + plan.batch + 1e5
    refuse_allocation(monkeypatch)
    monkeypatch.setattr(memory_plan, "device_capacity", lambda devices: (limit, "a test limit"))
    with pytest.raises(MemoryPlanError) as error:
        Trainer(cfg, devices=jax.devices()[:1], console=False)
    message = str(error.value)
    assert message.startswith("the compiled train step needs ")
    assert "activations, gradients and scratch (XLA)" in message
    assert "train.micro_batch_size (now 64 sequences" in message
    assert 'model.remat="full" (now "none"' in message
    assert "train.loss_chunks=8" in message


def test_the_check_can_be_switched_off_and_the_trainer_reports_its_plan(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_plan, "device_capacity", lambda devices: (1.0, "a test limit"))
    trainer = Trainer(
        debug_config(tmp_path, **{"train.check_memory": False}),
        devices=jax.devices()[:1],
        console=False,
    )
    try:
        trainer.run()
        assert trainer.memory.temp > 0 and trainer.memory.params > 0
        assert trainer.compile_s > 0
    finally:
        trainer.close()


def test_config_sizes_the_state_per_device_for_a_planned_mesh():
    def figures(*extra):
        out = subprocess.run(
            [sys.executable, "-m", "jaxtrain", "config", "configs/llama2_7b.py", "--json", *extra],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["derived"]

    alone = figures("--devices", "1")
    sharded = figures(
        "--devices", "64", "--hosts", "8", "--config.mesh.dcn_data=1", "--config.mesh.dcn_fsdp=-1"
    )
    assert sharded["mesh"]["fsdp"] == 64
    params = 6_738_415_616 * 4
    assert alone["state_bytes_per_device"]["parameters"] == params
    assert alone["state_bytes_per_device"]["optimizer_state"] == pytest.approx(2 * params, 1e-6)
    # fsdp=64 splits every matrix; only the small norm weights stay whole.
    norms = 65 * 4096 * 4  # 2 per layer and the final one, replicated
    assert sharded["state_bytes_per_device"]["parameters"] == params // 64 + norms * 63 // 64
    assert "per device on mesh fsdp=64" in sharded["memory_per_device"]


@pytest.mark.slow  # a subprocess that imports jax and lays out a 405B model (abstractly)
def test_a_model_that_cannot_fit_exits_2_with_the_figures_and_no_traceback(tmp_path):
    start = time.monotonic()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxtrain",
            "--config",
            "configs/llama3_1_405b.py",
            "--config.data.kind=synthetic",
            f"--config.run.dir={tmp_path / 'run'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert time.monotonic() - start < 120
    assert "Traceback" not in out.stderr and "RESOURCE_EXHAUSTED" not in out.stderr
    assert out.stderr.startswith(
        "jaxtrain train: error: the train state alone (before activations) needs "
    ), out.stderr
    assert "optimizer state" in out.stderr and "mesh.ici_fsdp" in out.stderr
    assert not (tmp_path / "run" / "checkpoints").exists() or not any(
        (tmp_path / "run" / "checkpoints").iterdir()
    )
