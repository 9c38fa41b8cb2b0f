"""The compile-only planning tool: runs on a debug config, extrapolates depth exactly."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import jax
import numpy as np
from conftest import REPO

from jaxtrain import run
from jaxtrain.commands.bench import synthetic_batch
from jaxtrain.config import loader as config_lib
from jaxtrain.models.assembly.pipeline import bubble_fraction
from jaxtrain.planning import compile as compile_plan
from jaxtrain.planning.compile import count_collectives
from jaxtrain.trainer import Trainer


def _bytes_per_device(tree) -> int:
    return sum(
        math.prod(leaf.sharding.shard_shape(leaf.shape)) * leaf.dtype.itemsize
        for leaf in jax.tree.leaves(tree)
    )


def test_tool_plans_a_debug_config_on_8_devices():
    overrides = [
        "--config.model.num_layers=3",
        "--config.train.global_batch_size=16",
        "--config.train.micro_batch_size=8",
        "--config.train.seq_len=64",
    ]
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "compile_plan.py"),
            "--config",
            str(REPO / "configs" / "llama_debug.py"),
            "--devices",
            "8",
            "--layers",
            "1,2",
            "--json",
            *overrides,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    plan = report["plan"]
    assert plan["num_layers"] == 3 and [p["num_layers"] for p in report["compiled"]] == [1, 2]
    assert plan["mesh"]["fsdp"] == 8
    assert plan["collectives"]["all-gather"] > 0  # FSDP gathers parameters

    # Arguments (sharded state + batch) are affine in depth: the extrapolation is exact.
    cfg = config_lib.load_config(
        str(REPO / "configs" / "llama_debug.py"), [o.removeprefix("--config.") for o in overrides]
    )
    setup = run.setup(cfg, check_data=False)
    expected = _bytes_per_device(setup.layout.abstract) + _bytes_per_device(setup.abstract_batch())
    assert plan["memory"]["argument"] == expected
    # XLA's count adds the masked half of causal attention to the formula's.
    assert 1.0 <= plan["xla_flops"] / plan["formula_flops"] < 1.5


def test_plan_of_a_pipeline_shows_stages_bubble_and_the_permutes():
    cfg = config_lib.load_config(
        str(REPO / "configs" / "llama_debug.py"),
        [
            "model.num_layers=4",
            "mesh.ici_pipeline=4",
            "mesh.ici_fsdp=2",
            "train.global_batch_size=16",
            "train.seq_len=32",
        ],
    )
    plan, _ = compile_plan.compile_step(cfg)
    # 16 sequences, 2 batch shards inside the stages: 8 micro batches of 2 (4 per stage).
    assert plan.pipeline == {
        "stages": 4,
        "blocks_per_stage": "1 of the model.num_layers=4 blocks",
        "repeats": 1,
        "micro_batches": 8,
        "sequences_per_micro_batch": 2,
        "bubble_fraction": round(bubble_fraction(4, 8), 4),
    }
    assert plan.collectives["collective-permute"] > 0  # activations move stage to stage
    setup = run.setup(cfg, check_data=False)
    assert plan.memory["argument"] == _bytes_per_device(setup.layout.abstract) + _bytes_per_device(
        setup.abstract_batch()
    )
    text = compile_plan.format_plan("llama_debug", plan, [plan])
    assert (
        "pipeline at 4 layers: 4 stages of 1 of the model.num_layers=4 blocks, 8 micro "
        "batches of 2 sequences per pass, 1 repeat(s): stages idle 27.3% of each pass" in text
    )


def test_the_trainer_and_the_planner_compile_the_run_setups_one_step(tmp_path):
    """`RunSetup` builds the jitted step once; the trainer runs what the planner measures."""
    cfg = config_lib.load_config(
        str(REPO / "configs" / "llama_debug.py"),
        [
            f"run.dir={tmp_path / 'run'}",
            "mesh.ici_fsdp=4",
            "mesh.ici_data=2",
            "train.global_batch_size=16",
            "train.micro_batch_size=8",
            "train.seq_len=32",
            "train.loss_chunks=2",
            "train.progress=False",
        ],
    )
    setup = run.setup(cfg, check_data=False)
    assert setup.train_step is setup.train_step and setup.eval_step is setup.eval_step
    lowered, _ = setup.compile_train_step()
    trainer = Trainer(cfg, console=False)
    try:
        assert trainer.lowered_step.as_text() == lowered.as_text()
        local = synthetic_batch(cfg, trainer.spec.vocab_size)
        batch = trainer.setup.global_batch(local)
        assert batch.keys() == local.keys()
        for name, array in batch.items():
            assert array.sharding == setup.batch_sharding
            np.testing.assert_array_equal(np.asarray(array), local[name])
        state, metrics = trainer.compiled_step(trainer.state, batch)
        trainer.state = state
        assert np.isfinite(float(metrics["loss"]))
    finally:
        trainer.close()


def test_collectives_are_counted_by_opcode():
    hlo = """
  %all-gather.1 = f32[8,4]{1,0} all-gather(f32[1,4]{1,0} %p), dimensions={0}
  %ars = (f32[4], f32[4]) all-reduce-start(f32[4] %a), to_apply=%add
  %ard = f32[4] all-reduce-done((f32[4], f32[4]) %ars)
  %rs = f32[1]{0} reduce-scatter(f32[8]{0} %all-gather.1), dimensions={0}
  %cp = f32[4] collective-permute(f32[4] %x), source_target_pairs={{0,1}}
"""
    assert count_collectives(hlo) == {
        "all-gather": 1,
        "reduce-scatter": 1,
        "all-reduce": 1,
        "all-to-all": 0,
        "collective-permute": 1,
    }
