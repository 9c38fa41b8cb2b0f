"""`python -m jaxtrain config` plans a jaxtrain config for this host's devices and a foreign file
for the launch it was written for (grown to what its parallel sizes need), and then shows this
host's devices and mesh beside the planned ones."""

import json

import jax
import pytest
from conftest import REPO

from jaxtrain.cli import main

PRIMUS = "Primus/examples/megatron/configs/MI300X/llama2_7B-BF16-pretrain.yaml"
HERE = "this host: 2 cpu device(s)"


@pytest.fixture
def two_devices(monkeypatch):
    """A host with two devices (the test process has eight) and no launcher variables."""
    monkeypatch.setattr(jax, "device_count", lambda: 2)
    for var in ("NNODES", "GPUS_PER_NODE", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


def derived(capsys, *argv):
    assert main(["config", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["derived"]


def test_a_jaxtrain_config_is_planned_for_this_host(capsys, two_devices):
    d = derived(capsys, REPO / "configs" / "llama_debug.py")
    assert (d["devices"], d["hosts"], d["devices_from"]) == (2, 1, HERE)
    assert d["mesh"]["fsdp"] == 2 and "devices_here" not in d
    assert "fsdp=2" in d["memory_per_device"]


def test_a_foreign_file_is_planned_for_its_launchers_defaults(compat_samples, capsys, two_devices):
    # Primus' launcher runs 1 node x 8 GPUs unless NNODES / GPUS_PER_NODE say otherwise.
    d = derived(capsys, compat_samples / PRIMUS)
    assert (d["devices"], d["hosts"], d["mesh"]["fsdp"]) == (8, 1, 8)
    assert d["devices_from"] == (f"NNODES=1 (default), GPUS_PER_NODE=8 (default) (planned; {HERE})")
    assert (d["devices_here"], d["mesh_here"]["fsdp"]) == (2, 2)


@pytest.mark.parametrize(
    "name, devices, hosts, mesh",
    [
        # tensor 8 x pipeline 8: 8 hosts of 8.
        ("MI300X/llama3.1_405B-FP8-pretrain", 64, 8, {"pipeline": 8, "tensor": 8}),
        # pipeline 16 x expert 8: Megatron's expert groups span pipeline ranks too, so 128.
        ("MI355X/deepseek_v3-BF16-pretrain", 128, 16, {"pipeline": 16, "expert": 8}),
    ],
)
def test_parallel_sizes_larger_than_the_launch_are_planned_for_the_hosts_they_need(
    compat_samples, capsys, two_devices, name, devices, hosts, mesh
):
    path = compat_samples / f"Primus/examples/megatron/configs/{name}.yaml"
    d = derived(capsys, path)
    assert (d["devices"], d["hosts"]) == (devices, hosts)
    assert {axis: d["mesh"][axis] for axis in mesh} == mesh
    assert d["num_params"] > 4e11 and "GiB per device" in d["memory_per_device"]
    assert "this launch has 8 (NNODES=1 (default), GPUS_PER_NODE=8 (default))" in d["devices_from"]
    assert f"which training refuses: set NNODES={hosts}" in d["devices_from"]
    # Training refuses the launch at hand in one line, with the host count that fits.
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"e.g. NNODES={hosts} with 8 devices" in err


def test_a_launch_the_file_or_environment_names_is_planned_beside_this_host(
    compat_samples, capsys, two_devices, monkeypatch
):
    d = derived(capsys, compat_samples / "prime-hosted" / "pretrain.toml")
    assert (d["devices"], d["mesh"]["fsdp"]) == (8, 8)
    assert d["devices_from"] == f"[deployment] num_train_gpus = 8 (planned; {HERE})"
    assert (d["devices_here"], d["mesh_here"]["fsdp"]) == (2, 2)

    monkeypatch.setenv("NNODES", "2")
    monkeypatch.setenv("GPUS_PER_NODE", "8")
    d = derived(capsys, compat_samples / PRIMUS)
    assert (d["devices"], d["hosts"], d["mesh"]["data"], d["mesh"]["fsdp"]) == (16, 2, 2, 8)
    assert d["devices_from"] == f"NNODES=2, GPUS_PER_NODE=8 in the environment (planned; {HERE})"
    assert d["devices_here"] == 2


def test_devices_asked_for_win(compat_samples, capsys, two_devices):
    d = derived(capsys, compat_samples / "prime-hosted" / "pretrain.toml", "--devices", "4")
    assert (d["devices"], d["mesh"]["fsdp"], d["devices_here"]) == (4, 4, 2)
    assert d["devices_from"] == f"--devices 4 --hosts 1 (planned; {HERE})"
    assert main(["config", str(REPO / "configs" / "llama_debug.py"), "--devices", "4"]) == 0
    out = capsys.readouterr().out
    assert f"# devices_from: --devices 4 --hosts 1 (planned; {HERE})" in out
    assert "# mesh_here: {'data': 1, 'pipeline': 1, 'fsdp': 2" in out
