"""The hosted-pretraining flow end to end, as a prime-rl user runs it.

A corpus is tokenized by datatrove's own DocumentTokenizer into train and validation shards; the
published `pretrain.toml` (tests/fixtures/compat/prime-hosted) gets only its paths and model
changed, the model being a tiny Qwen3 `config.json` written by transformers. The command
`python -m jaxtrain --config pretrain.toml` (shrunk to a short run by prime-rl keys on the command
line) is stopped with SIGTERM, run again unchanged, and must finish with per-step losses equal to
an uninterrupted run's, every checkpoint kept (no ckpt.keep_last: prime-rl keeps all); run once
more, the finished run changes nothing and says so. docs/migrating.md shows this flow.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import COMPAT_SAMPLES, REPO
from data_fixtures import EOS, corpus_texts
from multiprocess_helpers import child_env

from jaxtrain.cli import main
from jaxtrain.rundir.metrics import read_jsonl

STEPS, EVERY = 120, 20
# prime-rl keys on the command line shrink the run; --config.* adds a log line per step.
SHRINK = [
    f"max_steps={STEPS}",
    "data.seq_len=32",
    "val.data.seq_len=32",
    "data.batch_size=8",
    "data.micro_batch_size=1",
    f"val.interval={EVERY}",
    "val.num_samples=16",
    f"ckpt.interval={EVERY}",
    "--config.train.log_every=1",
    "--config.train.progress=false",
]
COMMAND = [sys.executable, "-m", "jaxtrain", "--config", "pretrain.toml", *SHRINK]


def tokenize(texts: list[str], out: Path, tokenizer: Path) -> Path:
    """`texts` as datatrove `.ds` shards, written by datatrove's DocumentTokenizer."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    source = out.with_name(out.name + "-jsonl")
    source.mkdir(parents=True)
    (source / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    LocalPipelineExecutor(
        pipeline=[
            JsonlReader(str(source)),
            DocumentTokenizer(
                str(out), tokenizer_name_or_path=str(tokenizer / "tokenizer.json"), eos_token=EOS
            ),
        ],
        tasks=1,
        workers=1,
        logging_dir=str(out.with_name(out.name + "-logs")),
    ).run()
    return out


def tiny_qwen3(folder: Path, tokenizer: Path) -> Path:
    """A two-layer Qwen3 `config.json` (written by transformers) beside the corpus' tokenizer."""
    from transformers import Qwen3Config

    Qwen3Config(
        vocab_size=400,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    ).save_pretrained(folder)
    for item in tokenizer.iterdir():
        shutil.copy(item, folder / item.name)
    return folder


def pretrain_toml(tmp_path: Path, tokenizer: Path) -> str:
    """The published pretrain.toml with its paths and model pointed at local files."""
    train = tokenize(corpus_texts(400, seed=1), tmp_path / "tinystories" / "train", tokenizer)
    val = tokenize(corpus_texts(60, seed=2), tmp_path / "tinystories" / "val", tokenizer)
    model = tiny_qwen3(tmp_path / "qwen3-tiny", tokenizer)
    text = (COMPAT_SAMPLES / "prime-hosted" / "pretrain.toml").read_text()
    for old, new in (
        ("PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT", model),
        ("datasets/tinystories/train", train),
        ("datasets/tinystories/val", val),
    ):
        assert f'"{old}"' in text
        text = text.replace(f'"{old}"', f'"{new}"')
    return text


def start(cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        COMMAND,
        cwd=cwd,
        env=child_env(1),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    return out


def documented_flow() -> list[tuple[str, list[str]]]:
    """(command, output lines) of docs/migrating.md's prime-rl example, `...` lines left out."""
    doc = (REPO / "docs" / "migrating.md").read_text()
    block = re.search(
        r"<!-- prime-rl-resume -->\n```\n(.*?)```\n<!-- /prime-rl-resume -->", doc, re.S
    )
    assert block, "docs/migrating.md lost its prime-rl example"
    flow: list[tuple[str, list[str]]] = []
    for line in block.group(1).splitlines():
        if line.startswith("$ "):
            flow.append((line[2:], []))
        elif line.strip() != "...":
            flow[-1][1].append(line)
    return flow


def normalised(line: str) -> str:
    """A line with its numbers, the folder above runs/ and runs of spaces made neutral."""
    line = re.sub(r"\S*(runs/pretrain)", r"\1", line)
    return " ".join(re.sub(r"\d+(\.\d+)?", "N", line).split())


def records(run: Path) -> dict[int, dict]:
    """{step: {loss, val_loss}} of a run; a step logged twice fails."""
    by_step: dict[int, dict] = {}
    for r in read_jsonl(run / "metrics.jsonl"):
        for key in ("loss", "val_loss"):
            if key in r:
                assert key not in by_step.setdefault(r["step"], {}), f"{key} at {r['step']} twice"
                by_step[r["step"]][key] = r[key]
    return by_step


def checkpoints(run: Path) -> list[int]:
    return sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())


def snapshot(run: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(run)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in run.rglob("*")
        if p.is_file() and p.name != ".jaxtrain.lock"
    }


@pytest.mark.slow  # four training processes (tokenize, compile, train 120 tiny steps)
def test_a_prime_rl_pretrain_toml_stops_resumes_and_finishes_like_one_run(
    tmp_path, tiny_tokenizer, capsys
):
    toml = pretrain_toml(tmp_path, tiny_tokenizer)
    reference, stopped = tmp_path / "reference", tmp_path / "stopped"
    for folder in (reference, stopped):
        folder.mkdir()
        (folder / "pretrain.toml").write_text(toml)
    capsys.readouterr()
    assert main(["config", str(stopped / "pretrain.toml"), *SHRINK]) == 0
    outputs = [capsys.readouterr().out]
    reference_out = finish(start(reference))
    ref_run, run = reference / "runs" / "pretrain", stopped / "runs" / "pretrain"
    assert "0 unsupported" in reference_out
    expected = records(ref_run)
    assert sorted(expected) == list(range(1, STEPS + 1))
    assert checkpoints(ref_run) == list(range(EVERY, STEPS + 1, EVERY))  # keep_last: all

    proc = start(stopped)  # stopped once it has saved a checkpoint at [ckpt] interval
    deadline = time.monotonic() + 120
    while proc.poll() is None and (
        not (run / "metrics.jsonl").exists() or max(records(run), default=0) <= EVERY
    ):
        assert time.monotonic() < deadline, "no step logged"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = finish(proc)
    outputs.append(out)
    at = max(records(run))
    assert EVERY < at < STEPS, "SIGTERM arrived after the run ended"
    assert f"stopped by SIGTERM at step {at}: checkpoint step {at} is complete on disk" in out

    out = finish(start(stopped))  # the identical command resumes
    outputs.append(out)
    assert f"resumed from step {at} in {run / 'checkpoints'}" in out
    assert records(run) == expected  # every step's loss and validation loss, bit for bit
    assert checkpoints(run) == sorted({*range(EVERY, STEPS + 1, EVERY), at})

    before = snapshot(run)
    out = finish(start(stopped))
    outputs.append(out)
    assert f"run runs/pretrain is finished at step {STEPS}" in out and "nothing changed" in out
    assert snapshot(run) == before

    # docs/migrating.md shows this flow: its commands, and lines these runs printed.
    flow = documented_flow()
    assert [command for command, _ in flow] == ["python -m jaxtrain config pretrain.toml"] + [
        "python -m jaxtrain --config pretrain.toml"
    ] * 3
    for (command, lines), out in zip(flow, outputs, strict=True):
        printed = {normalised(line) for line in out.splitlines()}
        for line in lines:
            assert normalised(line) in printed, f"{command}: {line!r} not printed:\n{out}"
