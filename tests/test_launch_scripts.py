"""tools/launch_slurm.sbatch and tools/launch_multinode.sh work as written on a first use."""

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import REPO

SBATCH = REPO / "tools" / "launch_slurm.sbatch"


def test_slurm_log_needs_no_folder_at_submission():
    # Slurm opens --output/--error before the script runs, so a folder in them must already
    # exist; a first `sbatch` from a fresh checkout has none.
    directives = re.findall(r"^#SBATCH\s+--(output|error)[= ](\S+)", SBATCH.read_text(), re.M)
    assert directives
    for name, path in directives:
        assert "/" not in path, f"#SBATCH --{name}={path} needs a folder that may not exist"


# ------------------------------------------------- platform detection (dry runs, no launch)

MULTINODE = REPO / "tools" / "launch_multinode.sh"
BASH = shutil.which("bash")
GPU_VARS = ("HSA_", "NCCL_", "GPU_MAX_HW_QUEUES", "XLA_FLAGS", "XLA_PYTHON_CLIENT_MEM_FRACTION")
no_kfd = pytest.mark.skipif(os.path.exists("/dev/kfd"), reason="this host has an AMD GPU driver")


def _dry_run(script, tmp_path, tools=(), **env):
    """(exit code, platform, {var: value} the script sets, command, output) of a dry run whose
    PATH holds only `tools` (fake rocm-smi / nvidia-smi) and a fake scontrol."""
    bin_dir = Path(tempfile.mkdtemp(dir=tmp_path))
    # A long node list: more than a pipe holds, as `scontrol show hostnames` prints for a
    # large allocation.
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\necho node001\ni=2\nwhile [ $i -le 20000 ]; do echo node$i; i=$((i + 1)); done\n"
    )
    (bin_dir / "head").symlink_to(shutil.which("head"))  # for scripts that pipe into it
    for tool in tools:
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
    for f in bin_dir.iterdir():
        if not f.is_symlink():
            f.chmod(0o755)
    env = {
        "PATH": str(bin_dir),
        "JAXTRAIN_LAUNCH_DRY_RUN": "1",
        "SLURM_JOB_NODELIST": "node[001-002]",
        "SLURM_JOB_ID": "1234",
        "SLURM_JOB_NUM_NODES": "2",
        **env,
    }
    done = subprocess.run(
        [BASH, str(script), "configs/llama3_8b.py", "--config.train.steps=5"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=30,
    )
    lines = done.stdout.splitlines()
    platform = next((x.split(": ", 1)[1] for x in lines if x.startswith("platform: ")), None)
    set_vars = dict(x[5:].split("=", 1) for x in lines if x.startswith("env: "))
    command = next((x for x in lines if x.startswith("command: ")), "")
    return done.returncode, platform, set_vars, command, done.stdout + done.stderr


@no_kfd
@pytest.mark.parametrize("script", [MULTINODE, SBATCH], ids=["multinode", "slurm"])
def test_a_host_without_gpu_tools_is_cpu_with_no_gpu_settings(script, tmp_path):
    code, platform, set_vars, command, out = _dry_run(script, tmp_path)
    assert code == 0, out
    assert platform == "cpu" and "nvidia" not in out and "amd" not in out
    assert not [v for v in set_vars if v.startswith(GPU_VARS)], set_vars
    assert command.endswith(
        "python3 -u -m jaxtrain --config configs/llama3_8b.py --config.train.steps=5"
    )


@pytest.mark.parametrize("script", [MULTINODE, SBATCH], ids=["multinode", "slurm"])
@pytest.mark.parametrize(
    "tool,vendor", [("rocm-smi", "amd"), ("amd-smi", "amd"), ("nvidia-smi", "nvidia")]
)
def test_the_gpu_vendor_comes_from_its_tool(script, tool, vendor, tmp_path):
    code, platform, set_vars, _, out = _dry_run(script, tmp_path, tools=[tool])
    assert code == 0, out
    assert platform == vendor and f", {vendor}" in out.splitlines()[0]
    assert set_vars["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.92"
    assert ("HSA_FORCE_FINE_GRAIN_PCIE" in set_vars) == (vendor == "amd")


@pytest.mark.parametrize("script", [MULTINODE, SBATCH], ids=["multinode", "slurm"])
def test_gpu_vendor_overrides_detection_and_is_checked(script, tmp_path):
    _, platform, set_vars, _, _ = _dry_run(
        script, tmp_path, tools=["rocm-smi"], GPU_VENDOR="cpu", NET_IFACE="eth1"
    )
    assert platform == "cpu" and set_vars["GLOO_SOCKET_IFNAME"] == "eth1"
    assert "NCCL_SOCKET_IFNAME" not in set_vars
    code, _, _, _, out = _dry_run(script, tmp_path, GPU_VENDOR="intel")
    assert code == 2 and "GPU_VENDOR=intel is not one of amd, nvidia, cpu" in out


def test_slurm_script_outside_a_job_says_so(tmp_path):
    code, *_, out = _dry_run(SBATCH, tmp_path, SLURM_JOB_NODELIST="")
    assert code == 2 and "not inside a Slurm job" in out


def test_slurm_coordinator_is_the_first_node(tmp_path):
    _, _, set_vars, command, out = _dry_run(SBATCH, tmp_path, tools=["nvidia-smi"])
    assert "MASTER_ADDR" in set_vars, out
    assert set_vars["MASTER_ADDR"] == "node001" and set_vars["MASTER_PORT"] == "21234"
    assert command.startswith("command: srun --ntasks-per-node=1 --kill-on-bad-exit=1 python3")
