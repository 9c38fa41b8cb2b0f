"""Running the command of a finished run again changes nothing and says the run is finished."""

from __future__ import annotations

from pathlib import Path

from checkpoint_fixtures import STEPS, small_config

from jaxtrain.commands.train import train
from jaxtrain.rundir.metrics import read_jsonl


def _snapshot(run_dir: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file of a run directory but its lock file."""
    return {
        str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in run_dir.rglob("*")
        if p.is_file() and p.name != ".jaxtrain.lock"
    }


def test_a_rerun_of_a_finished_run_writes_nothing(tmp_path, capsys):
    run_dir = tmp_path / "run"
    cfg = small_config(run_dir)
    train(cfg)
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert records[-1]["step"] == STEPS and "val_loss" in records[-1]
    before = _snapshot(run_dir)
    assert any(name.startswith("tensorboard/") for name in before)
    capsys.readouterr()

    assert train(small_config(run_dir)) == {}
    out = capsys.readouterr().out
    assert _snapshot(run_dir) == before  # no metric line, no event file, no checkpoint
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[-1] == (
        f"run {run_dir} is finished at step {STEPS} (train.steps={STEPS}); its "
        f"checkpoints are in {run_dir / 'checkpoints'}. Nothing to train, "
        "nothing changed."
    )
    assert not any(line.startswith(("training ", "step ")) for line in lines)


def test_a_final_validation_that_never_ran_is_recorded_on_rerun(tmp_path, capsys):
    # What a run stopped between its final checkpoint and its final validation leaves.
    run_dir = tmp_path / "run"
    train(small_config(run_dir))
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    assert "val_loss" in lines[-1]
    metrics.write_text("".join(lines[:-1]))
    capsys.readouterr()

    result = train(small_config(run_dir))
    assert set(result) == {"val_loss", "val_ppl"}
    assert (
        "the final validation, missing from metrics.jsonl, was recorded" in capsys.readouterr().out
    )
    records = read_jsonl(metrics)
    assert len(records) == len(lines) and records[-1]["step"] == STEPS
    assert "val_loss" in records[-1]
    train(small_config(run_dir))  # and now there is nothing left to do
    assert len(read_jsonl(metrics)) == len(lines)
