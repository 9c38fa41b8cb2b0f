"""The tokenizer tool at scale: worker processes, streaming writers and readers, the CLI's
Megatron output. (Formats and backends: test_tokenize.py, test_megatron.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from data_fixtures import EOS, corpus_texts

from jaxtrain.data import shard_writers, text_inputs
from jaxtrain.data.datatrove import find_shards
from jaxtrain.data.megatron import megatron_files
from jaxtrain.data.shard_writers import MegatronDocumentWriter, ShuffledWriter
from jaxtrain.data.tokenize import tokenize_files

REPO = Path(__file__).resolve().parent.parent


def _jsonl(folder: Path, parts: int, per_part: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(parts):
        with open(folder / f"part{k}.jsonl", "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in corpus_texts(per_part, seed=k))
    return [str(folder / "*.jsonl")]


def test_worker_processes_write_what_one_process_writes(
    tmp_path: Path, tiny_tokenizer: Path
) -> None:
    inputs = _jsonl(tmp_path / "in", 3, 40)
    counts = {}
    for workers in (1, 2):
        seen = []
        written = tokenize_files(
            inputs,
            tiny_tokenizer,
            tmp_path / f"w{workers}",
            tasks=3,
            workers=workers,
            progress=lambda d, t, seen=seen: seen.append((d, t)),
        )
        counts[workers] = np.sum(seen, axis=0).tolist()
        assert len(written) == 3
    assert counts[1] == counts[2] and counts[1][0] == 120
    for ours in sorted((tmp_path / "w1").iterdir()):
        assert ours.read_bytes() == (tmp_path / "w2" / ours.name).read_bytes(), ours.name
    assert counts[1][1] == sum(s.num_tokens for s in find_shards([str(tmp_path / "w1")]))


def test_shuffled_writer_replays_in_groups(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(shard_writers, "REPLAY_GROUP", 3)  # many groups from a small corpus
    docs = [list(range(i, i + 1 + i % 5)) for i in range(20)]
    final = MegatronDocumentWriter(tmp_path / "x", np.dtype(np.uint16))
    writer = ShuffledWriter(final, tmp_path / "spool", np.uint16, seed=7)
    writer.add_many(docs[:11])
    writer.add_many(docs[11:])
    writer.close()
    (shard,) = megatron_files(tmp_path / "x")
    order = np.random.default_rng(7).permutation(20)
    np.testing.assert_array_equal(shard.tokens, [t for i in order for t in docs[i]])
    assert not (tmp_path / "spool").exists()


def test_parquet_and_jsonl_stream_in_batches(
    tmp_path: Path, tiny_tokenizer: Path, monkeypatch
) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    monkeypatch.setattr(text_inputs, "ENCODE_BATCH", 4)  # Parquet batches and encode calls
    texts = corpus_texts(30, seed=3)
    pq.write_table(pa.table({"text": texts}), tmp_path / "a.parquet", row_group_size=7)
    batches = []
    (ds,) = tokenize_files(
        [str(tmp_path / "a.parquet")],
        tiny_tokenizer,
        tmp_path / "out",
        shuffle_documents=False,
        progress=lambda d, t: batches.append(d),
    )
    assert batches == [4] * 7 + [2]
    assert find_shards([str(ds)])[0].num_docs == 30


def test_command_line_megatron_workers_merge(tmp_path: Path, tiny_tokenizer: Path) -> None:
    inputs = _jsonl(tmp_path / "in", 2, 25)
    cmd = [
        sys.executable,
        str(REPO / "tools" / "tokenize_corpus.py"),
        "--input",
        *inputs,
        "--tokenizer",
        str(tiny_tokenizer),
        "--output",
        str(tmp_path / "out"),
        "--tasks",
        "2",
        "--workers",
        "2",
        "--format",
        "megatron",
        "--merge",
        "--eos-token",
        EOS,
        "--quiet",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "wrote 1 shards, 50 documents" in done.stdout and "(uint16)" in done.stdout
    (f,) = megatron_files(tmp_path / "out")
    assert f.prefix.name == "text_document" and f.num_docs == 50
    assert np.count_nonzero(np.asarray(f.tokens) == 0) == 50  # one EOS (id 0) per document
