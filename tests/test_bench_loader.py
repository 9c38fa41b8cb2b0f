"""tools/bench_loader.py writes its shard set only into a folder of its own and removes only
the files it wrote (the benchmark itself is not run here: it reads gigabytes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_tool

from jaxtrain.data.datatrove import find_shards

GB = 2e-4  # 100,000 uint16 tokens


@pytest.fixture(scope="module")
def bench():
    return load_tool("bench_loader")


def test_refuses_a_folder_it_did_not_write(bench, tmp_path: Path, capsys) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert bench.main(["--gb", str(GB), "--dir", str(tmp_path)]) == 2
    assert "holds files this tool did not write" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_reuses_rewrites_and_removes_only_its_own_files(bench, tmp_path: Path) -> None:
    folder = tmp_path / "shards"
    tokens = bench.write_shards(folder, GB, 2)
    shards = find_shards([str(folder)])
    assert sum(s.num_tokens for s in shards) == tokens == 100_000
    first = shards[0].path.stat().st_mtime_ns
    assert bench.write_shards(folder, GB, 2) == tokens  # complete: reused as it is
    assert shards[0].path.stat().st_mtime_ns == first
    (folder / "notes.txt").write_text("added by hand")
    assert bench.write_shards(folder, GB, 4) == tokens // 2  # other settings: rewritten
    assert (folder / "notes.txt").read_text() == "added by hand"
    bench.remove_shards(folder)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    (folder / "notes.txt").unlink()
    bench.write_shards(folder, GB, 2)  # an empty folder is taken, but was not created: kept
    bench.remove_shards(folder)
    assert folder.is_dir() and not any(folder.iterdir())
    bench.remove_shards(tmp_path)  # not the tool's folder: nothing is removed
    assert folder.is_dir()


def test_removes_the_folder_it_created(bench, tmp_path: Path) -> None:
    folder = tmp_path / "new" / "shards"
    bench.write_shards(folder, GB, 2)
    bench.remove_shards(folder)
    assert not folder.exists()


def test_every_rate_is_given_as_ratios_of_the_raw_copy_and_the_step_need(bench) -> None:
    rows = [
        ("raw np.memmap sequential copy", "-", 2e9),
        ("loader, shuffled", "16 x 2048, workers=0, prefetch=4", 5e7),
        ("train step, 5.5M-param Llama (synthetic data)", "8 x 512", 2500.0),
    ]
    lines = bench.table(rows, 2e9, 2500.0, 4.0).splitlines()
    assert lines[1] == "| what | batch | tokens/s | / raw memmap copy | / train step's need |"
    assert lines[3] == (
        "| raw np.memmap sequential copy | - | 2,000.0M (4.00 GB/s) | 1.0 | 800,000 |"
    )
    assert lines[4] == (
        "| loader, shuffled | 16 x 2048, workers=0, prefetch=4 | 50.0M | 0.025 | 20,000 |"
    )
    assert lines[5].endswith("| 2,500 | 0.000 | 1.0 |")
