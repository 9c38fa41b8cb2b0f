"""The compile-only planning tool: runs on a debug config, extrapolates depth exactly."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import jax
from conftest import REPO

from jaxtrain import config as config_lib
from jaxtrain import run
from jaxtrain.compile_plan import count_collectives


def _bytes_per_device(tree) -> int:
    return sum(math.prod(leaf.sharding.shard_shape(leaf.shape)) * leaf.dtype.itemsize
               for leaf in jax.tree.leaves(tree))


def test_tool_plans_a_debug_config_on_8_devices():
    overrides = ["--config.model.num_layers=3", "--config.train.global_batch_size=16",
                 "--config.train.micro_batch_size=8", "--config.train.seq_len=64"]
    out = subprocess.run(
        [sys.executable, str(REPO / "tools" / "compile_plan.py"), "--config",
         str(REPO / "configs" / "llama_debug.py"), "--devices", "8", "--layers", "1,2",
         "--json", *overrides],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    plan = report["plan"]
    assert plan["num_layers"] == 3 and [p["num_layers"] for p in report["compiled"]] == [1, 2]
    assert plan["mesh"]["fsdp"] == 8
    assert plan["collectives"]["all-gather"] > 0  # FSDP gathers parameters

    # Arguments (sharded state + batch) are affine in depth: the extrapolation is exact.
    cfg = config_lib.load_config(str(REPO / "configs" / "llama_debug.py"),
                                 [o.removeprefix("--config.") for o in overrides])
    setup = run.setup(cfg, check_data=False)
    expected = _bytes_per_device(setup.layout.abstract) + \
        _bytes_per_device(setup.abstract_batch())
    assert plan["memory"]["argument"] == expected
    # XLA's count adds the masked half of causal attention to the formula's.
    assert 1.0 <= plan["xla_flops"] / plan["formula_flops"] < 1.5


def test_collectives_are_counted_by_opcode():
    hlo = """
  %all-gather.1 = f32[8,4]{1,0} all-gather(f32[1,4]{1,0} %p), dimensions={0}
  %ars = (f32[4], f32[4]) all-reduce-start(f32[4] %a), to_apply=%add
  %ard = f32[4] all-reduce-done((f32[4], f32[4]) %ars)
  %rs = f32[1]{0} reduce-scatter(f32[8]{0} %all-gather.1), dimensions={0}
  %cp = f32[4] collective-permute(f32[4] %x), source_target_pairs={{0,1}}
"""
    assert count_collectives(hlo) == {"all-gather": 1, "reduce-scatter": 1, "all-reduce": 1,
                                      "all-to-all": 0, "collective-permute": 1}
