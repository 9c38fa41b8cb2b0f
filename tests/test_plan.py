"""`python -m jaxtrain plan` on 8 CPU devices: its picks are layouts the trainer accepts, its
memory figure matches the compiled program, and its first pick is not slower than the others."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from jaxtrain import cli, compat, run
from jaxtrain.commands import bench
from jaxtrain.planning import compile as compile_plan
from jaxtrain.planning import hlo_collectives

REPO = Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "configs" / "bench_tiny_llama.py")


def _plan(config: str, cache: Path, top: int) -> list[dict]:
    """`plan --json` of `config` on 8 CPU devices, compiling `top` candidates."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "jaxtrain", "plan", "--config", config, "--devices", "8"]
    command += ["--device-kind", "cpu", "--json", "--top", str(top), "--compile", str(top)]
    out = subprocess.run(
        [*command, "--cache-dir", str(cache)], env=env, capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "plan: compiling" in out.stderr  # the progress lines
    return json.loads(out.stdout)["candidates"]


@pytest.fixture(scope="module")
def picks(tmp_path_factory) -> list[dict]:
    return _plan(CONFIG, tmp_path_factory.mktemp("plan-cache"), 4)


def test_picks_are_layouts_the_trainer_accepts(picks):
    assert len(picks) == 4 and all(p["fits"] for p in picks)
    assert picks == sorted(picks, key=lambda p: -p["predicted_tokens_per_s"])
    for pick in picks:
        cfg = compat.load_config_file(CONFIG, pick["overrides"], allow_unsupported=True)
        run.setup(cfg, jax.devices(), check_data=False)  # raises on a layout it refuses
        assert 0 < pick["predicted_mfu"] < 1


@pytest.mark.parametrize("name", ["mixtral_debug.py", "nemotron_h_debug.py"])
def test_moe_and_hybrid_picks_are_accepted(name, tmp_path):
    config = str(REPO / "configs" / name)
    found = _plan(config, tmp_path, 2)
    assert found and found[0]["fits"]
    for pick in found:
        cfg = compat.load_config_file(config, pick["overrides"], allow_unsupported=True)
        run.setup(cfg, jax.devices(), check_data=False)


def test_memory_of_first_pick_matches_the_compiled_program(picks):
    cfg = compat.load_config_file(CONFIG, picks[0]["overrides"], allow_unsupported=True)
    compiled, _ = compile_plan.compile_step(cfg)
    predicted = picks[0]["memory_per_device_gib"] * 2**30
    assert abs(predicted - compiled.peak_bytes) <= 0.2 * compiled.peak_bytes


@pytest.mark.slow
def test_first_pick_is_nearly_the_fastest_measured(picks):
    """Benchmarks the first four picks: the first is within 15% of the fastest."""
    step_s = []
    for pick in picks[:4]:
        cfg = compat.load_config_file(CONFIG, pick["overrides"], allow_unsupported=True)
        step_s.append(bench.benchmark(cfg, steps=5, warmup=2)["step_time_s"])
    print(
        "measured step s:",
        step_s,
        "predicted tokens/s:",
        [p["predicted_tokens_per_s"] for p in picks],
    )
    assert min(step_s) / step_s[0] >= 0.85, step_s


def test_bad_input_is_one_line(capsys):
    assert cli.main(["plan", "--config", CONFIG, "--devices", "8", "--hosts", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--devices 8 is not divisible by --hosts 3" in err and "\n" not in err
    assert cli.main(["plan", "--config", CONFIG, "--devices", "8", "--device-kind", "TPU"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'TPU' is not known" in err and "MI300X" in err


def test_collective_bytes_groups_and_trip_counts():
    hlo = """
%body.1 (p: (s32[], f32[8,16])) -> (s32[], f32[8,16]) {
  %ag = bf16[8,16]{1,0} all-gather(bf16[2,16]{1,0} %x), replica_groups=[2,4]<=[8], dimensions={0}
  %ar = f32[8,16]{1,0} all-reduce(f32[8,16]{1,0} %y), replica_groups={{0,4},{1,5},{2,6},{3,7}}
}
ENTRY %main.2 (a: f32[8,16]) -> f32[8,16] {
  %w = (s32[], f32[8,16]) while(%t), condition=%cond.1, body=%body.1, backend_config={"known_trip_count":{"n":"3"}}
}
"""
    found = hlo_collectives.collectives(hlo)
    assert [(c.kind, c.result_bytes, c.group, c.runs) for c in found] == [
        ("all-gather", 256, (0, 1, 2, 3), 3),
        ("all-reduce", 512, (0, 4), 3),
    ]
    mesh = {"data": 2, "tensor": 4}
    summary = hlo_collectives.summarise(found, mesh)
    assert summary["all-gather over tensor"] == {"bus_bytes": 256 * 3 / 4 * 3, "runs": 3}
    assert summary["all-reduce over data"] == {"bus_bytes": 2 * 512 / 2 * 3, "runs": 3}


def test_memory_refusal_and_config_point_to_plan(monkeypatch, capsys):
    from jaxtrain.errors import ConfigError
    from jaxtrain.planning import memory

    cfg = compat.load_config_file(CONFIG, [], allow_unsupported=True)
    monkeypatch.setattr(sys, "argv", ["jaxtrain", "--config", CONFIG])
    plan = memory.MemoryPlan(params=2**30, optimizer=2**31, batch=0)
    with pytest.raises(ConfigError) as refused:
        memory.check_fits(plan, 2**20, "NVIDIA H100 80GB HBM3", cfg, {"fsdp": 8})
    assert f"python -m jaxtrain plan --config {CONFIG} --devices 8 --device-kind H100" in str(
        refused.value
    )
    assert cli.main(["config", CONFIG, "--devices", "16", "--hosts", "2"]) == 0
    assert f"python -m jaxtrain plan --config {CONFIG} --devices 16 --hosts 2" in (
        capsys.readouterr().out
    )
