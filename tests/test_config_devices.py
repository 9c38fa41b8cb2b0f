"""`python -m jaxtrain config` plans for this host's devices unless a launch says otherwise, and
then shows this host's devices and mesh beside the planned ones."""

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


def test_a_file_that_names_no_launch_is_planned_for_this_host(compat_samples, capsys, two_devices):
    d = derived(capsys, compat_samples / PRIMUS)  # the launcher's default would be 8 GPUs
    assert (d["devices"], d["hosts"], d["devices_from"]) == (2, 1, HERE)
    assert d["mesh"]["fsdp"] == 2 and "devices_here" not in d
    assert "fsdp=2" in d["memory_per_device"]
    d = derived(capsys, REPO / "configs" / "llama_debug.py")
    assert (d["devices"], d["devices_from"]) == (2, HERE)


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
