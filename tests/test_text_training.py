"""Training on raw text: the demo from its JSONL gives the losses of the same text tokenized
first, bit for bit, and a shuffled raw-text run killed after a checkpoint resumes exactly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkpoint_fixtures import STEPS, losses, small_config
from conftest import REPO
from data_fixtures import corpus_texts
from test_checkpointing import cli_command, wait_for_step

from jaxtrain.config import loader as config_lib
from jaxtrain.data.demo_corpus import build_demo_data
from jaxtrain.trainer import Trainer

sys.path.insert(0, str(REPO / "tools"))
import tokenize_corpus  # noqa: E402


def _train(cfg) -> dict[int, float]:
    trainer = Trainer(cfg, console=False)
    try:
        trainer.run()
    finally:
        trainer.close()
    return losses(Path(cfg.run.dir))


def test_demo_from_raw_jsonl_matches_the_tokenized_demo_bit_for_bit(tmp_path):
    demo = build_demo_data(tmp_path / "data", vocab_size=512, max_documents=60)
    text = Path(demo["root"]) / "text" / "train.jsonl"
    shards = tmp_path / "unshuffled"
    args = ["--input", str(text), "--tokenizer", demo["tokenizer"], "--output", str(shards)]
    assert tokenize_corpus.main([*args, "--no-shuffle", "--quiet"]) == 0
    common = {
        "train.steps": 30,
        "train.log_every": 1,
        "train.eval_every": 0,
        "train.progress": False,
        "checkpoint.every": 0,
        "sample.prompt": "",
        "data.prepare": "",
        "data.val_paths": "",
        "data.shuffle": False,
        "data.tokenizer": demo["tokenizer"],
    }
    configs = {
        kind: config_lib.load_config(
            str(REPO / "configs" / "demo.py"),
            {**common, "run.dir": str(tmp_path / kind), "data.kind": kind, "data.paths": path},
        )
        for kind, path in (("text", str(text)), ("datatrove", str(shards)))
    }
    raw, tokenized = _train(configs["text"]), _train(configs["datatrove"])
    assert sorted(raw) == list(range(1, 31))
    assert raw == tokenized  # exact float equality, every step


@pytest.mark.slow
def test_shuffled_raw_text_resumes_after_sigkill_bit_for_bit(tmp_path, tiny_tokenizer):
    (tmp_path / "corpus").mkdir()
    lines = [json.dumps({"text": t}) for t in corpus_texts(400, seed=5)]
    (tmp_path / "corpus" / "part.jsonl").write_text("\n".join(lines) + "\n")
    data = {
        "data.kind": "text",
        "data.paths": str(tmp_path / "corpus"),
        "data.tokenizer": str(tiny_tokenizer),
        "data.shuffle": True,
        "data.worker_count": 1,
    }
    straight = _train(small_config(tmp_path / "straight", **data))
    assert sorted(straight) == list(range(1, STEPS + 1))

    run_dir = tmp_path / "run"
    with open(tmp_path / "killed.log", "w") as out:
        command = cli_command(run_dir, **data)
        proc = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for_step(proc, run_dir, 5)
            deadline = time.monotonic() + 60
            while not (run_dir / "checkpoints" / "4").is_dir():
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert max(losses(run_dir)) < STEPS, "the run ended before it could be killed"
    result = subprocess.run(
        cli_command(run_dir, **data), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "resumed from step " in result.stdout
    assert losses(run_dir) == straight
