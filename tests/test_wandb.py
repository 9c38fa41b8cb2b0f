"""Weights & Biases, offline: the wandb run holds what metrics.jsonl holds, and a resumed run
continues the same wandb run, its recomputed steps replacing the lost ones."""

from __future__ import annotations

import shutil

import jax
import pytest
import wandb
from conftest import REPO
from wandb_records import read_run, synced_view

from jaxtrain.config import loader as config_lib
from jaxtrain.rundir.metrics import read_jsonl
from jaxtrain.rundir.step_folders import step_folder
from jaxtrain.trainer import Trainer


@pytest.fixture(autouse=True)
def fresh_wandb():
    """wandb reads its environment once per process (`wandb.setup`): each test starts anew,
    as each training process does."""
    yield
    wandb.teardown()


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


def wandb_config(tmp_path, corpus, steps):
    return config_lib.load_config(
        str(REPO / "configs" / "llama_debug.py"),
        {
            "run.dir": str(tmp_path / "run"),
            "data.kind": "datatrove",
            "data.paths": str(corpus.folder),
            "data.val_paths": str(corpus.folder),
            "train.seq_len": 32,
            "train.global_batch_size": 8,
            "train.steps": steps,
            "train.log_every": 1,
            "train.eval_every": 3,
            "train.eval_batches": 1,
            "train.progress": False,
            "checkpoint.every": 4,
            "metrics.wandb_project": "jaxtrain-test",
            "metrics.wandb_tags": "a,b",
        },
    )


def train(cfg):
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    try:
        trainer.run()
    finally:
        trainer.close()


def by_attempt(records):
    """{step: values} as the run's last attempt at each step wrote them."""
    final, attempt, previous = {}, {}, 0
    for r in records:
        if r["step"] < previous:  # a restart: its steps replace the earlier attempt's
            final.update(attempt)
            attempt = {}
        previous = r["step"]
        attempt.setdefault(r["step"], {}).update(r)
    final.update(attempt)
    return {
        s: {k: v for k, v in row.items() if k not in ("step", "time")} for s, row in final.items()
    }


def test_a_resumed_run_continues_the_same_wandb_run_and_matches_metrics_jsonl(
    tmp_path, datatrove_corpus, offline
):
    run_dir = tmp_path / "run"
    train(wandb_config(tmp_path, datatrove_corpus, 6))
    wandb_id = (run_dir / "wandb_id").read_text().strip()
    # The crash came before checkpoint 6 was complete: the resume starts from 4.
    shutil.rmtree(step_folder(run_dir / "checkpoints", 6))
    train(wandb_config(tmp_path, datatrove_corpus, 8))

    assert (run_dir / "wandb_id").read_text().strip() == wandb_id
    starts = sorted((run_dir / "wandb").glob(f"offline-run-*-{wandb_id}/run-{wandb_id}.wandb"))
    assert len(starts) == 2  # one wandb run, two starts
    synced_id, history, summary = synced_view(starts)
    assert synced_id == wandb_id
    # The second start rewinds the run to the checkpoint it resumed from: on sync the server
    # drops the first start's steps 5 and 6, recomputed by the second.
    assert [read_run(path)["rewind"] for path in starts] == [None, 4]

    records = read_jsonl(run_dir / "metrics.jsonl")
    expected = by_attempt(records)
    assert sorted(history) == sorted(expected) == list(range(1, 9))
    for step, row in expected.items():
        logged = {k: v for k, v in history[step].items() if not k.startswith("_")}
        assert logged == row, step
    assert "val_loss" in history[3] and "val_loss" in history[6]
    last_loss = [r["loss"] for r in records if "loss" in r][-1]
    assert summary["loss"] == last_loss


@pytest.mark.slow
def test_a_run_goes_on_with_one_warning_when_the_wandb_service_is_down(
    tmp_path, datatrove_corpus, monkeypatch, capfd
):
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("WANDB_API_KEY", "x" * 86)
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "5")
    train(wandb_config(tmp_path, datatrove_corpus, 4))
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3, 4]
    warnings = [line for line in capfd.readouterr().err.splitlines() if "Weights & Biases" in line]
    assert len(warnings) == 1 and "the run goes on without it" in warnings[0], warnings
