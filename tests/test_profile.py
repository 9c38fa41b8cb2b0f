"""train.profile_start / train.profile_steps leave a JAX profiler trace of exactly those steps
in <run dir>/profile, and `runs` lists it."""

from __future__ import annotations

import gzip
import json

import jax
from checkpoint_fixtures import small_config

from jaxtrain.commands import runs
from jaxtrain.trainer import Trainer


def test_a_trace_of_steps_5_and_6_is_left_in_the_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    cfg = small_config(
        run_dir, **{"train.profile_start": 5, "train.profile_steps": 2, "checkpoint.every": 0}
    )
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    try:
        trainer.run(steps=9)
    finally:
        trainer.close()
    xplanes = list((run_dir / "profile").rglob("*.xplane.pb"))
    assert len(xplanes) == 1 and xplanes[0].stat().st_size > 0
    (perfetto,) = (run_dir / "profile").rglob("perfetto_trace.json.gz")
    events = json.loads(gzip.decompress(perfetto.read_bytes()))
    events = events["traceEvents"] if isinstance(events, dict) else events
    steps = {int(e["args"]["step_num"]) for e in events if e.get("name") == "train"}
    assert steps == {5, 6}  # each traced step annotated with its number, no other step
    listed = runs.format_report(runs.build_report(run_dir)).splitlines()
    traces = next(line for line in listed if line.strip().startswith("traces"))
    assert str(xplanes[0].relative_to(run_dir)) in traces
