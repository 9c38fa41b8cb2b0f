"""tools/bench_checkpoint.py runs end to end at a tiny size and prints its figures (the
throughput itself is not checked: it depends on the disk)."""

from __future__ import annotations

from conftest import load_tool

TINY = [
    "--hidden",
    "64",
    "--layers",
    "2",
    "--heads",
    "4",
    "--intermediate",
    "128",
    "--vocab",
    "512",
]


def _bench():
    return load_tool("bench_checkpoint")


def test_bench_checkpoint_prints_save_restore_and_plain_disk_figures(tmp_path, capsys):
    assert _bench().main([*TINY, "--dir", str(tmp_path / "bench"), "--compare-reads"]) == 0
    out = capsys.readouterr().out
    for label in ("orbax save", "orbax restore", "plain write", "plain read"):
        line = next(line for line in out.splitlines() if line.startswith(label))
        assert "GB/s" in line
    assert "model: hidden 64, 2 layers, vocab 512: 147,776 params" in out
    assert "compression none:" in out and "blocked / train step" in out
    assert "arrays read, alternately, no checksums: jaxtrain " in out
    assert not (tmp_path / "bench").exists()


def test_bench_checkpoint_leaves_what_it_did_not_write(tmp_path):
    folder = tmp_path / "scratch"
    (folder / "results").mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    (folder / "results" / "old.json").write_text("{}")
    assert _bench().main([*TINY, "--dir", str(folder), "--compression", "zstd"]) == 0
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == [
        "notes.txt",
        "results",
        "results/old.json",
    ]
    assert (folder / "notes.txt").read_text() == "mine"
