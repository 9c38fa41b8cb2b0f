"""`jaxtrain checkpoints RUN_DIR [--verify] [--step N]`: listing and verifying saved steps."""

from __future__ import annotations

import glob
import json
import shutil
import time
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from checkpoint_fixtures import small_config

from jaxtrain.cli import main
from jaxtrain.commands import checkpoints as checkpoint_listing
from jaxtrain.trainer import Trainer


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A llama-debug run with checkpoints at steps 2 and 4 (8 devices, fsdp=8)."""
    path = tmp_path_factory.mktemp("inspect") / "run"
    trainer = Trainer(small_config(path), console=False)
    trainer.run(4)
    trainer.close()
    return path


def test_listing_shows_steps_time_size_and_config(run_dir, capsys):
    assert main(["checkpoints", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"{run_dir / 'checkpoints'}: 2 complete checkpoint(s)" in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [row[0] for row in rows] == ["2", "4"]
    for row in rows:
        assert row[1].count("-") == 2 and row[2].count(":") == 2  # date and time written
        assert row[4] == "MB" and float(row[3]) > 0.5  # params + 2 Adam moments, float32
        assert row[5:8] == ["llama-debug:", "d=64", "L=2"]
    assert "139,584 params float32; train.steps=16" in out


def test_verify_reads_every_array_on_any_device_count(run_dir):
    # Saved on an fsdp=8 mesh, read back on one device.
    result = checkpoint_listing.verify(run_dir, 2, devices=jax.devices()[:1])
    assert result.ok, result.problems
    assert result.arrays == 39 and result.values == 3 * 139_584 + 3  # params, mu, nu, counts
    assert str(result).startswith("step 2: OK: 39 arrays (418,755 values) read")


def _flip_a_byte_of(array_bytes: bytes, data_files: list[str]) -> None:
    """Flips one bit in the middle of an array's bytes where a data file holds them (the
    arrays are written uncompressed by default, so their bytes are in the file as they are)."""
    for name in data_files:
        data = bytearray(Path(name).read_bytes())
        at = data.find(array_bytes)
        if at >= 0:
            data[at + len(array_bytes) // 2] ^= 0x01
            Path(name).write_bytes(bytes(data))
            return
    raise AssertionError("the array's bytes are in no OCDBT data file")


# Read without a target, the arrays come back as numpy arrays on the saved shardings' hosts.
@pytest.mark.filterwarnings("ignore:Sharding info not provided:UserWarning")
def test_verify_reports_a_damaged_step_and_exits_nonzero(run_dir, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    state = copy / "checkpoints" / "4" / "state"
    with ocp.PyTreeCheckpointer() as reader:
        kernel = np.asarray(reader.restore(state)["params"]["lm_head"]["kernel"])
    _flip_a_byte_of(kernel.tobytes()[:256], glob.glob(str(state / "ocdbt.process_0" / "d" / "*")))
    capsys.readouterr()
    assert main(["checkpoints", str(copy), "--verify"]) == 1
    out = capsys.readouterr().out
    assert "step 4: FAILED" in out
    assert "1 array(s) differ from the checksums saved with them: params.lm_head.kernel" in out
    assert "checkpoint step 4" in out and "is damaged: " in out
    assert f"mv {copy / 'checkpoints' / '4'} {copy / 'checkpoints' / '4'}.damaged" in out
    assert main(["checkpoints", str(copy), "--verify", "--step", "2"]) == 0
    assert "step 2: OK" in capsys.readouterr().out
    assert main(["checkpoints", str(copy), "--verify", "--step", "3"]) == 2
    assert "no checkpoint at step 3; saved steps: [2, 4]" in capsys.readouterr().err


def test_verify_of_emptied_array_files_reports_the_step_and_nothing_else(
    run_dir, tmp_path, capsys, unraisable
):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    for data_file in (copy / "checkpoints" / "4" / "state").rglob("d/*"):
        data_file.write_bytes(b"")
    capsys.readouterr()
    assert main(["checkpoints", str(copy), "--verify"]) == 1
    time.sleep(0.5)  # a read left running would complete into its closed event loop by now
    out, err = capsys.readouterr()
    assert "step 4: FAILED" in out and "step 2: OK" in out
    assert "Traceback" not in out + err
    assert unraisable == []  # e.g. "RuntimeError: Event loop is closed" from Orbax's opens


def test_verify_names_the_arrays_whose_values_changed(run_dir, tmp_path, capsys):
    # Values that read back cleanly but differ from what was saved (a silent bit flip
    # on disk, or a file swapped in from another run) are caught by the saved checksums.
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    checksums_file = copy / "checkpoints" / "4" / "checksums" / "metadata"
    checksums = json.loads(checksums_file.read_text())
    checksums["params.lm_head.kernel"] ^= 0x5A5A
    checksums_file.write_text(json.dumps(checksums))
    capsys.readouterr()
    assert main(["checkpoints", str(copy), "--verify"]) == 1
    out = capsys.readouterr().out
    assert "step 4: FAILED" in out
    assert "1 array(s) differ from the checksums saved with them: params.lm_head.kernel" in out


@pytest.mark.parametrize(
    "damage", ["config not json", "config without optim", "data state not json"]
)
def test_verify_reports_unreadable_items_and_goes_on(run_dir, tmp_path, capsys, damage):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    step4 = copy / "checkpoints" / "4"
    if damage == "config not json":
        (step4 / "config" / "metadata").write_text('{"model": {')
    elif damage == "config without optim":
        saved = json.loads((step4 / "config" / "metadata").read_text())
        del saved["optim"]
        (step4 / "config" / "metadata").write_text(json.dumps(saved))
    else:
        (step4 / "data" / "metadata").write_text('{"next_ind')
    capsys.readouterr()
    assert main(["checkpoints", str(copy), "--verify"]) == 1
    out = capsys.readouterr().out
    failed, ok = out.index("step 4: FAILED"), out.index("step 2: OK")
    assert failed < ok  # newest first, and the damaged step does not stop the others
    assert f"checkpoint step 4 in {copy / 'checkpoints'} is damaged: " in out
    assert f"mv {step4} {step4}.damaged" in out
    assert "1 damaged step(s)" in out
    assert main(["checkpoints", str(copy), "--verify", "--step", "2"]) == 0
