"""`jaxtrain checkpoints RUN_DIR [--verify] [--step N]`: listing and verifying saved steps."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
from pathlib import Path

import jax
import pytest
from checkpoint_fixtures import small_config

from jaxtrain import checkpoint_listing
from jaxtrain.cli import main
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


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # the first four bytes of every zstd frame


def _middle_of_largest_compressed_frame(data: bytes) -> int:
    """Offset in the middle of the biggest zstd frame of an OCDBT data file.

    The data files pack many zstd frames (array chunks and b-tree nodes); which file holds
    what depends on write order. A flip inside a frame's body always changes what it
    decodes to or makes it undecodable, where a flip in a frame header might not.
    """
    starts = [m.start() for m in re.finditer(re.escape(_ZSTD_MAGIC), data)]
    assert starts, "OCDBT data files are expected to be zstd-compressed"
    bounds = list(zip(starts, starts[1:] + [len(data)]))
    begin, end = max(bounds, key=lambda b: b[1] - b[0])
    return (begin + end) // 2


def test_verify_reports_a_damaged_step_and_exits_nonzero(run_dir, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    files = sorted(glob.glob(str(copy / "checkpoints" / "4" / "state" / "ocdbt.process_0" /
                                 "d" / "*")), key=os.path.getsize)
    data = bytearray(Path(files[-1]).read_bytes())
    data[_middle_of_largest_compressed_frame(bytes(data))] ^= 0x01
    Path(files[-1]).write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["checkpoints", str(copy), "--verify"]) == 1
    out = capsys.readouterr().out
    # Either the chunk no longer decodes or it decodes to values whose checksum differs;
    # both are reported as damage with the way back to step 2.
    assert "step 4: FAILED" in out
    assert "checkpoint step 4" in out and "is damaged: " in out
    assert f"mv {copy / 'checkpoints' / '4'} {copy / 'checkpoints' / '4'}.damaged" in out
    assert main(["checkpoints", str(copy), "--verify", "--step", "2"]) == 0
    assert "step 2: OK" in capsys.readouterr().out
    assert main(["checkpoints", str(copy), "--verify", "--step", "3"]) == 2
    assert "no checkpoint at step 3; saved steps: [2, 4]" in capsys.readouterr().err


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


@pytest.mark.parametrize("damage", ["config not json", "config without optim",
                                    "data state not json"])
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
