"""`jaxtrain runs`: config summary, checkpoints, latest metrics and ETA of a run directory."""

import json

from jaxtrain import __main__ as cli
from jaxtrain.commands.runs import build_report, duration, format_report, step_rate


def write_run(folder, steps_logged, total=100, seconds_per_step=2.0, checkpoints=()):
    folder.mkdir(parents=True)
    config = {
        "run": {"name": "demo"},
        "model": {
            "preset": "llama-debug",
            "family": "llama",
            "vocab_size": 512,
            "hidden_size": 64,
            "num_layers": 2,
            "num_heads": 4,
            "num_kv_heads": 2,
            "head_dim": 16,
            "intermediate_size": 128,
            "max_seq_len": 256,
        },
        "train": {"steps": total, "seq_len": 128, "global_batch_size": 32, "micro_batch_size": 8},
        "checkpoint": {"dir": ""},
        "optim": {"lr": 3e-3, "schedule": "cosine", "warmup_steps": 20},
        "mesh": {
            "ici_data": 1,
            "ici_fsdp": -1,
            "ici_tensor": 2,
            "dcn_data": -1,
            "dcn_fsdp": 1,
            "rules": "fsdp_tensor",
        },
    }
    (folder / "config.json").write_text(json.dumps(config))
    with open(folder / "metrics.jsonl", "w") as f:
        for step in steps_logged:
            record = {
                "step": step,
                "time": 1000.0 + seconds_per_step * step,
                "loss": 10.0 / step,
                "tokens_per_s": 2048.0,
                "mfu": 0.125,
            }
            if step % 20 == 0:
                record["val_loss"] = 9.0 / step
            f.write(json.dumps(record) + "\n")
    for step in checkpoints:  # step folders as Orbax leaves them: the listing reads names only
        (folder / "checkpoints" / str(step) / "state").mkdir(parents=True)
    return folder


def test_report_of_a_running_job(tmp_path):
    report = build_report(write_run(tmp_path / "run", range(10, 51, 10)))
    assert report.step == 50 and not report.finished
    assert report.val_step == 40 and report.latest["val_loss"] == 9.0 / 40
    assert abs(report.steps_per_s - 0.5) < 1e-9
    assert abs(report.eta_seconds() - 100.0) < 1e-6  # 50 steps left at 0.5 steps/s
    text = format_report(report, now=1000.0 + 2 * 50 + 30)
    for expected in (
        "llama-debug (llama",
        "seq_len 128",
        "batch 32 (micro 8)",
        "lr 0.003",
        "ici fsdp=-1 tensor=2",
        "dcn data=-1",
        "step 50/100 (50%)",
        "loss 0.2000",
        "val_loss 0.2250 (step 40)",
        "tokens/s 2,048",
        "MFU 0.125",
        "updated      30s ago",
        "eta          1m40s",
    ):
        assert expected in text, (expected, text)


def test_a_restart_does_not_slow_the_rate_and_a_finished_run_has_no_eta(tmp_path):
    records = [{"step": s, "time": float(s), "loss": 1.0} for s in (10, 20, 30)]
    records += [{"step": s, "time": 5000.0 + s, "loss": 1.0} for s in (30, 40, 50)]
    assert step_rate(records) == 1.0
    report = build_report(write_run(tmp_path / "done", range(10, 101, 10)))
    assert report.finished and report.eta_seconds() is None
    assert "finished" in format_report(report)


def test_cli_lists_runs_with_their_checkpoints(tmp_path, capsys):
    a = write_run(tmp_path / "a", range(10, 31, 10), checkpoints=(10, 20))
    b = tmp_path / "b"
    b.mkdir()  # started, nothing written yet
    assert cli.main(["runs", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "checkpoints  10, 20" in out
    assert "checkpoints  none" in out and "no metrics yet" in out and "no config.json" in out
    assert duration(3725) == "1h02m" and duration(65) == "1m05s"
