"""`bench --profile`: a JAX profiler trace of more train steps, each annotated, without the
Python tracer's calls."""

from __future__ import annotations

import jax
from conftest import REPO

from jaxtrain.commands import bench
from jaxtrain.config import loader as config_lib


def test_bench_traces_the_annotated_steps_of_the_xla_program(tmp_path):
    cfg = config_lib.load_config(str(REPO / "configs" / "llama_debug.py"), bench.TINY_SHAPE)
    bench.benchmark(cfg, steps=1, warmup=1, devices=jax.devices()[:1], profile_dir=tmp_path)
    (xplane,) = tmp_path.glob("plugins/profile/*/*.xplane.pb")
    assert list(tmp_path.glob("plugins/profile/*/*.trace.json.gz"))
    events = [
        (event.name, dict(event.stats))
        for plane in jax.profiler.ProfileData.from_file(str(xplane)).planes
        for line in plane.lines
        for event in line.events
    ]
    steps = [stats.get("step_num") for name, stats in events if name == "train"]
    assert sorted(steps) == list(range(bench.PROFILED_STEPS))
    assert not [name for name, _ in events if name.startswith("$")]  # no Python calls traced
