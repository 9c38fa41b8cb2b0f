"""train.profile_start / train.profile_steps leave a JAX profiler trace of exactly those steps
in <run dir>/profile, and `runs` lists it."""

from __future__ import annotations

import gzip
import json

import jax
from checkpoint_fixtures import small_config

from jaxtrain.commands import profile as profile_command
from jaxtrain.commands import runs
from jaxtrain.rundir import trace_ops
from jaxtrain.trainer import Trainer


def _traced_run(run_dir, steps: int, **keys):
    cfg = small_config(
        run_dir, **{"train.profile_start": 5, "train.profile_steps": 2, "checkpoint.every": 0}
    )
    for key, value in keys.items():
        cfg.train[key] = value
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    try:
        trainer.run(steps=steps)
    finally:
        trainer.close()
    (perfetto,) = (run_dir / "profile").rglob("perfetto_trace.json.gz")
    events = json.loads(gzip.decompress(perfetto.read_bytes()))
    return events["traceEvents"] if isinstance(events, dict) else events


def test_a_trace_of_steps_5_and_6_is_left_in_the_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    events = _traced_run(run_dir, steps=9)
    xplanes = list((run_dir / "profile").rglob("*.xplane.pb"))
    assert len(xplanes) == 1 and xplanes[0].stat().st_size > 0
    steps = {int(e["args"]["step_num"]) for e in events if e.get("name") == "train"}
    assert steps == {5, 6}  # each traced step annotated with its number, no other step
    # The host's Python calls are left out unless asked for (they crowd out XLA's operations).
    assert not [e for e in events if e.get("name", "").startswith("$")]
    listed = runs.format_report(runs.build_report(run_dir)).splitlines()
    traces = next(line for line in listed if line.strip().startswith("traces"))
    assert str(xplanes[0].relative_to(run_dir)) in traces
    # `jaxtrain profile RUN_DIR`: the two steps' ops, the products' rates from the program
    # saved beside the trace.
    program = profile_command.program_facts(trace_ops.saved_program(run_dir))
    summary = trace_ops.summarise(run_dir, program)
    assert summary.steps == 2 and [r for r in summary.kinds if r.name.endswith(" with dots")]


def test_train_profile_python_adds_the_hosts_python_calls(tmp_path):
    events = _traced_run(tmp_path / "run", steps=6, profile_python=True)
    assert [e for e in events if e.get("name", "").startswith("$")]
