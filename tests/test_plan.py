"""`python -m jaxtrain plan` on 8 CPU devices: its picks are layouts the trainer accepts, its
memory figure matches the compiled program and the measured peak, and its first pick is not
slower than the others."""

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from multiprocess_helpers import child_env

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
def plan_of(tmp_path_factory):
    """The first four picks for configs/NAME, planned once for the module's tests."""
    found: dict[str, list[dict]] = {}

    def picks_of(name: str) -> list[dict]:
        if name not in found:
            found[name] = _plan(str(REPO / "configs" / name), tmp_path_factory.mktemp("plan"), 4)
        return found[name]

    return picks_of


@pytest.fixture(scope="module")
def picks(plan_of) -> list[dict]:
    return plan_of(Path(CONFIG).name)


# The dense model's plan is quick to check; the MoE and hybrid ones cost a plan each (~35 s).
MODELS = [
    "bench_tiny_llama.py",
    pytest.param("mixtral_debug.py", marks=pytest.mark.slow),
    pytest.param("nemotron_h_debug.py", marks=pytest.mark.slow),
]


def test_picks_are_layouts_the_trainer_accepts(picks):
    assert len(picks) == 4 and all(p["fits"] for p in picks)
    assert picks == sorted(picks, key=lambda p: -p["predicted_tokens_per_s"])
    for pick in picks:
        cfg = compat.load_config_file(CONFIG, pick["overrides"], allow_unsupported=True)
        run.setup(cfg, jax.devices(), check_data=False)  # raises on a layout it refuses
        assert 0 < pick["predicted_mfu"] < 1


@pytest.mark.parametrize("name", MODELS)
def test_memory_of_first_pick_matches_the_compiled_program(name, plan_of):
    config, first = str(REPO / "configs" / name), plan_of(name)[0]
    cfg = compat.load_config_file(config, first["overrides"], allow_unsupported=True)
    compiled, _ = compile_plan.compile_step(cfg)
    predicted = first["memory_per_device_gib"] * 2**30
    assert abs(predicted - compiled.peak_bytes) <= 0.2 * compiled.peak_bytes


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc")
def test_memory_of_first_pick_matches_the_measured_peak(picks):
    """Measured on 8 CPU devices in a process of its own (tests/measure_step_memory.py): the
    process's peak resident memory during a step, over the devices (2-core Intel Xeon: 0.0828-
    0.0832 GiB against 0.0820 predicted, with one core or both, idle or loaded). Only for this model: the MoE and hybrid debug models' 10 MB
    steps read 8.1-10.6 MB from one run to the next (mixtral_debug, 10.5 predicted), too
    unsteady for a 20% bound, so those are held to the compiled program's figure only."""
    config, first = CONFIG, picks[0]
    script = str(REPO / "tests" / "measure_step_memory.py")
    env = dict(child_env(8), MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run(
        [sys.executable, script, config, *first["overrides"]],
        env=env, capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    measured = json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes_per_device"]
    predicted = first["memory_per_device_gib"] * 2**30
    assert abs(predicted - measured) <= 0.2 * measured, (predicted, measured)


def _measured_step_s(config: str, picks: list[dict], rounds: int = 2) -> list[float]:
    """`bench`'s step time of each pick, the best of `rounds` rounds that each time every
    pick once (its trainer raises on a layout it refuses). Interleaved: the process's first
    measurement runs slower than the rest, and a machine shared with other work changes its
    pace over minutes, so no pick should take all of its runs in one stretch."""
    step_s = [float("inf")] * len(picks)
    with contextlib.ExitStack() as stack:
        trainers = [
            stack.enter_context(bench.synthetic_trainer(
                compat.load_config_file(config, p["overrides"], allow_unsupported=True),
                steps=rounds * 7 + 1,
            ))
            for p in picks
        ]  # fmt: skip
        for _ in range(rounds):
            for i, trainer in enumerate(trainers):
                figures = bench.time_steps(trainer, steps=5, warmup=2)
                step_s[i] = min(step_s[i], figures["step_time_s"])
    return step_s


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_first_pick_is_nearly_the_fastest_measured(name, plan_of):
    """Dense, mixture of experts and hybrid: the first of four picks measures within 15% of
    the fastest. The MoE case is the one that needs the compiled program's own FLOPs: with
    one expert per device (expert=4 x tensor=2) the grouped matmul multiplies all gathered
    rows, 1.7x the products of fsdp=4 x tensor=2, and its step takes 1.35x as long (at XLA's
    default optimisation; about as long at the tests' level 0)."""
    config, found = str(REPO / "configs" / name), plan_of(name)
    assert found[0]["fits"]
    step_s = _measured_step_s(config, found[:4])
    print(name, "measured step s:", step_s, "predicted tokens/s:",
          [p["predicted_tokens_per_s"] for p in found[:4]])  # fmt: skip
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


def test_matmul_flops_of_a_compiled_program_count_every_loop_trip():
    """`hlo_flops` counts each dot once per run, loops' trips included, where XLA's own cost
    analysis counts a loop body once."""
    from jaxtrain.planning import hlo_flops

    def layers(x, w_LDD, head_DV):
        x, _ = jax.lax.scan(lambda h, w: (jax.nn.relu(h @ w), None), x, w_LDD)
        return x @ head_DV

    x = jax.ShapeDtypeStruct((64, 32), "float32")
    w = jax.ShapeDtypeStruct((5, 32, 32), "float32")
    head = jax.ShapeDtypeStruct((32, 48), "float32")
    compiled = jax.jit(layers).lower(x, w, head).compile()
    expected = 5 * 2 * 64 * 32 * 32 + 2 * 64 * 32 * 48
    assert hlo_flops.dot_flops(compiled.as_text()) == expected
    counted = compiled.cost_analysis()
    counted = counted[0] if isinstance(counted, (list, tuple)) else counted
    assert counted["flops"] < expected  # why the program is walked instead
    # Operands printed with their shapes, as some HLO printers do:
    inline = """ENTRY %main (a: f32[64,32], b: f32[32,48]) -> f32[64,48] {
  ROOT %d = f32[64,48]{1,0} dot(f32[64,32]{1,0} %a, f32[32,48]{1,0} %b), lhs_contracting_dims={1}
}"""
    assert hlo_flops.dot_flops(inline) == 2 * 64 * 32 * 48


def test_matmul_flops_of_the_experts_tiles_count_every_tile_the_bound_allows():
    """The loops over one expert's tiles run as many times as the routing gives that expert,
    unknown when compiling; the tiles state their bound (every group padded to whole tiles),
    and the count charges the forward and both backward products for all of it."""
    from jaxtrain.models.layers import grouped_matmul
    from jaxtrain.planning import hlo_flops

    rows, d, f, tile = 100, 8, 12, 8
    sizes = jax.numpy.asarray([30, 0, 50, 15], "int32")

    def loss(x, w):
        return jax.numpy.sum(grouped_matmul.tiled(x, w, sizes, tile))

    x = jax.ShapeDtypeStruct((rows, d), "float32")
    w = jax.ShapeDtypeStruct((4, d, f), "float32")
    text = jax.jit(jax.value_and_grad(loss, argnums=(0, 1))).lower(x, w).compile().as_text()
    padded_rows = grouped_matmul.tiled_rows(rows, 4, tile)
    assert hlo_flops.dot_flops(text) == 3 * 2 * padded_rows * d * f


def test_on_cpu_the_program_that_runs_is_charged_its_own_flops():
    """A `cpu` prediction costs the compiled program's matmul FLOPs (recomputation and rows
    a grouped matmul pads or masks included); an accelerator's costs jaxtrain's formula."""
    from jaxtrain.planning import cost, hardware

    common = dict(
        model_flops_per_device=1e9, remat="none", rows_per_device=4096, bubble=0.0,
        collectives={}, dcn={}, tokens_per_step=8192, devices=8,
    )  # fmt: skip
    cpu = hardware.DeviceKind("cpu", 1e11, 0, 0, 0, 1.0, 0, overlap=0.0)
    formula = cost.predict(cpu, **common)
    executed = cost.predict(cpu, executed_flops_per_device=1.7e9, **common)
    assert executed.compute_s == pytest.approx(1.7 * formula.compute_s)
    assert executed.mfu == pytest.approx(formula.mfu / 1.7)  # MFU stays the model's FLOPs

    # The planner hands the compiled figure on for `cpu` only.
    from jaxtrain.planning import candidates, planner

    cfg = compat.load_config_file(CONFIG, [], allow_unsupported=True)
    spec = run.validate(cfg, check_data=False)
    cand = candidates.enumerate_candidates(cfg, 8, 1)[0]
    compiled = {"dot_flops": 1e15}
    for kind, charged in ((hardware.device_kind("H100", 8), False), (cpu, True)):
        guess = planner._predict(kind, cfg, spec, cand, {}, 8)
        scored = planner._predict(kind, cfg, spec, cand, {}, 8, compiled)
        assert (scored.compute_s > 100 * guess.compute_s) == charged, kind.name


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


def test_layout_scores_the_configs_own_layout(tmp_path):
    overrides = ["--config.mesh.ici_fsdp=4", "--config.mesh.ici_tensor=2"]
    command = [sys.executable, "-m", "jaxtrain", "plan", "--config", CONFIG, "--devices", "8"]
    command += ["--device-kind", "cpu", "--layout", "--json", "--cache-dir", str(tmp_path)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([*command, *overrides], env=env, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    [scored] = json.loads(out.stdout)["candidates"]
    assert {"--config.mesh.ici_fsdp=4", "--config.mesh.ici_tensor=2"} <= set(scored["overrides"])
    cfg = compat.load_config_file(CONFIG, overrides, allow_unsupported=True)
    compiled, _ = compile_plan.compile_step(cfg)
    assert scored["memory_per_device_gib"] * 2**30 == pytest.approx(compiled.peak_bytes)

    bad = subprocess.run(
        [*command, "--config.mesh.ici_tensor=3"], env=env, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr[-2000:]
    assert "mesh.ici_*" in bad.stderr


def test_a_foreign_config_is_read_as_launched_on_the_planned_devices(compat_samples):
    from jaxtrain.planning.compile_worker import launch_env

    primus = (
        compat_samples / "Primus/examples/megatron/configs/MI300X/llama3.1_8B-BF16-pretrain.yaml"
    )
    # Primus' micro_batch_size is per data-parallel rank: 2 sequences x 16 ranks.
    cfg = compat.load_config_file(primus, allow_unsupported=True, env=launch_env(16, 2))
    assert cfg.train.micro_batch_size == 32


def test_every_data_replica_pays_for_its_whole_update():
    """The optimizer update reads and writes all the state a device holds: a `data` replica
    holds all of it, an `fsdp` shard an eighth, and the prediction charges the difference
    at the device's memory bandwidth."""
    from jaxtrain.planning import candidates, cost, hardware

    cfg = compat.load_config_file(CONFIG, [], allow_unsupported=True)
    found = candidates.enumerate_candidates(cfg, 8, 1)

    def layout(axis: str) -> candidates.Candidate:
        return next(
            c
            for c in found
            if c.sizes[axis] == 8 and c.micro_batch == cfg.train.global_batch_size
            and (c.remat, c.loss_chunks) == ("none", 0)
        )  # fmt: skip

    replica, shard = layout("data"), layout("fsdp")
    assert replica.update_bytes == pytest.approx(8 * shard.update_bytes, rel=0.02)
    h100 = hardware.device_kind("H100", 8)
    common = dict(
        model_flops_per_device=1e12, remat="none", rows_per_device=4096, bubble=0.0,
        collectives={}, dcn={}, tokens_per_step=8192, devices=8,
    )  # fmt: skip
    slow = cost.predict(h100, update_bytes=replica.update_bytes, **common)
    fast = cost.predict(h100, update_bytes=shard.update_bytes, **common)
    assert slow.update_s == pytest.approx(replica.update_bytes / 3350e9)
    assert slow.step_s - fast.step_s == pytest.approx(slow.update_s - fast.update_s)


def test_fake_cpu_devices_are_measured_not_looked_up():
    """For `--device-kind cpu` the links, their latency and the memory bandwidth come from
    runs on that many fake devices of this host, and nothing hides behind compute."""
    from jaxtrain.planning import hardware

    cpu = hardware.device_kind("cpu", 4)
    for figure in ("peak_flops", "intra_gbs", "latency_intra_us", "hbm_gbs"):
        value = getattr(cpu, figure)
        assert 0 < value < float("inf"), (figure, value)
    assert cpu.intra_gbs == cpu.inter_gbs and cpu.overlap == 0.0
    assert hardware.device_kind("cpu", 4, intra_gbs=7.0).intra_gbs == 7.0  # still overridable
