"""`jaxtrain plot`: PNG figures from fabricated metrics.jsonl files of two runs."""

import json
import math
from pathlib import Path

from jaxtrain import __main__ as cli
from jaxtrain.commands.plot import FIGURES, load_run_metrics, plot_runs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fake_run(folder: Path, name: str, steps: int, scale: float, resumed_at: int = 0) -> Path:
    """A run directory with config.json and metrics.jsonl as the trainer writes them."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps({"run": {"name": name}, "train": {"steps": steps}})
    )
    lines = []
    logged = list(range(1, steps + 1))
    if resumed_at:  # a restart repeats the steps after the checkpoint
        logged += list(range(resumed_at + 1, steps + 1))
    for t, step in enumerate(logged):
        record = {
            "step": step,
            "time": 1000.0 + t,
            "loss": scale * 8 * math.exp(-step / 20),
            "lr": 1e-3 * min(1.0, step / 5),
            "grad_norm": 2.0 / step,
            "tokens_per_s": 5000.0 + step,
            "mfu": 0.3,
            "ppl": 10.0,
        }
        if step % 10 == 0:
            record |= {"val_loss": scale * 7 * math.exp(-step / 20), "val_ppl": 9.0}
        lines.append(json.dumps(record))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_plot_writes_one_png_per_metric_for_two_runs(tmp_path):
    a = fake_run(tmp_path / "a", "baseline", 30, 1.0)
    b = fake_run(tmp_path / "b", "bigger-lr", 30, 0.9, resumed_at=20)
    files = plot_runs([a, b], tmp_path / "plots")
    # Every figure but the harness's: these runs evaluated no harness task.
    expected = sorted(f"{stem}.png" for stem in FIGURES if stem != "harness")
    assert sorted(f.name for f in files) == expected
    for f in files:
        data = f.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, f


def test_resumed_steps_are_drawn_once_and_names_come_from_the_config(tmp_path):
    run = load_run_metrics(fake_run(tmp_path / "b", "bigger-lr", 30, 1.0, resumed_at=20))
    steps, _ = run.series("loss")
    assert run.name == "bigger-lr" and steps == list(range(1, 31))
    assert run.series("val_loss")[0] == [10, 20, 30]


def test_cli_plots_only_metrics_that_exist(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "time": s, "loss": 5.0 / s}) + "\n" for s in (1, 2, 3))
    )
    assert cli.main(["plot", str(run)]) == 0
    assert [p.name for p in (run / "plots").iterdir()] == ["loss.png"]
    assert "loss.png" in capsys.readouterr().out
    assert cli.main(["plot", str(tmp_path / "missing")]) == 2
