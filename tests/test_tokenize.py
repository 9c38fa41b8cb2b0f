"""Tokenizing files into datatrove shards (datatrove's own writer, run by our tasks) and the CLI."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from data_fixtures import EOS, DatatroveCorpus, corpus_texts, raw_tokens, write_wordlevel_tokenizer

from jaxtrain.data.datatrove import find_shards
from jaxtrain.data.errors import DataError
from jaxtrain.data.text_inputs import eos_id_from_tokenizer, expand_inputs
from jaxtrain.data.tokenize import tokenize_files

REPO = Path(__file__).resolve().parent.parent


def _jsonl(folder: Path, parts: list[list[str]]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    for k, texts in enumerate(parts):
        with open(folder / f"part{k}.jsonl", "w") as f:
            f.writelines(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts))
    return [str(folder / "*.jsonl")]


def _docs(ds: Path) -> list[tuple[int, ...]]:
    tokens = raw_tokens(ds)
    ends = np.fromfile(ds.with_name(ds.name + ".index"), "<u8").astype(np.int64)
    return [tuple(tokens[a:b]) for a, b in zip(np.r_[0, ends[:-1]], ends)]


def test_shards_are_what_datatroves_own_pipeline_writes(
    tmp_path: Path, tiny_tokenizer: Path
) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    texts = corpus_texts(90, seed=4)
    inputs = _jsonl(tmp_path / "in", [texts[:60], texts[60:]])
    for shuffle in (False, True):
        ours = tokenize_files(
            inputs,
            tiny_tokenizer,
            tmp_path / f"ours-{shuffle}",
            tasks=3,
            workers=1,
            shuffle_documents=shuffle,
            seed=5,
        )
        theirs = tmp_path / f"theirs-{shuffle}"
        for rank in range(2):  # one run per task: a fresh shuffle generator for each
            LocalPipelineExecutor(
                pipeline=[
                    JsonlReader(str(tmp_path / "in")),
                    DocumentTokenizer(
                        str(theirs),
                        tokenizer_name_or_path=str(tiny_tokenizer / "tokenizer.json"),
                        eos_token=EOS,
                        shuffle_documents=shuffle,
                        seed=5,
                    ),
                ],
                tasks=3,
                local_tasks=1,
                local_rank_offset=rank,
                logging_dir=str(tmp_path / f"logs-{shuffle}-{rank}"),
            ).run()
        assert len(ours) == 2  # the third task had no file, and left none
        assert not list((tmp_path / f"ours-{shuffle}").glob("00002_*"))
        stem = "00000_doc_shuffled" if shuffle else "unshuffled"
        assert [p.name for p in ours] == [f"{rank:05d}_{stem}.ds" for rank in range(2)]
        for mine in ours:
            for suffix in ("", ".index", ".metadata"):
                other = theirs / (mine.name + suffix)
                assert (mine.parent / other.name).read_bytes() == other.read_bytes(), other.name
    eos = eos_id_from_tokenizer(tiny_tokenizer)
    docs = [d for ds in ours for d in _docs(ds)]
    assert len(docs) == 90 and all(d[-1] == eos and eos not in d[:-1] for d in docs)


def test_reads_back_text_through_the_tokenizer(
    tmp_path: Path, datatrove_corpus: DatatroveCorpus
) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(datatrove_corpus.tokenizer)
    (shard, *_) = find_shards([str(datatrove_corpus.folder)])
    first = np.asarray(shard.tokens[: int(shard.doc_ends[0])])
    assert first[-1] == tok.eos_token_id == datatrove_corpus.eos_id
    assert tok.decode(first[:-1].tolist()) in datatrove_corpus.texts


def test_big_vocabulary_writes_uint32(tmp_path: Path) -> None:
    tok = write_wordlevel_tokenizer(tmp_path / "tok", 70000)
    inputs = _jsonl(tmp_path / "in", [["w1 w65535 w65536", "w69997 w3"]])
    tokenize_files(inputs, tok, tmp_path / "out", shuffle_documents=False, workers=1)
    (shard,) = find_shards([str(tmp_path / "out")], eos_id=69999)
    assert shard.dtype == np.uint32
    np.testing.assert_array_equal(shard.tokens, [1, 65535, 65536, 69999, 69997, 3, 69999])


def test_input_kinds(tmp_path: Path, tiny_tokenizer: Path) -> None:
    (tmp_path / "in" / "sub").mkdir(parents=True)
    (tmp_path / "in" / "a.txt").write_text("the quick brown fox")
    (tmp_path / "in" / "empty.txt").write_text("  \n")
    with gzip.open(tmp_path / "in" / "sub" / "b.jsonl.gz", "wt") as f:
        f.write(json.dumps({"content": "a lazy dog"}) + "\n\n" + json.dumps({"content": ""}))
    (tmp_path / "in" / "notes.bin").write_bytes(b"\0")
    files = expand_inputs([str(tmp_path / "in")])
    assert [f.name for f in files] == ["a.txt", "empty.txt", "b.jsonl.gz"]
    tokenize_files(
        [str(tmp_path / "in")],
        tiny_tokenizer,
        tmp_path / "out",
        text_key="content",
        shuffle_documents=False,
    )
    (shard,) = find_shards([str(tmp_path / "out")])
    assert shard.num_docs == 2


def test_parquet_input(tmp_path: Path, tiny_tokenizer: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["one doc", "", "two docs"]}), tmp_path / "a.parquet")
    tokenize_files([str(tmp_path / "a.parquet")], tiny_tokenizer, tmp_path / "out")
    assert find_shards([str(tmp_path / "out")])[0].num_docs == 2


def test_tokenize_errors(tmp_path: Path, tiny_tokenizer: Path) -> None:
    inputs = _jsonl(tmp_path / "in", [["some text"]])
    with pytest.raises(DataError, match=r"part0\.jsonl:1: no 'body' field \(fields: text, id\)"):
        tokenize_files(inputs, tiny_tokenizer, tmp_path / "out", text_key="body")
    tokenize_files(inputs, tiny_tokenizer, tmp_path / "out")
    with pytest.raises(DataError, match="already holds 3 shard files"):
        tokenize_files(inputs, tiny_tokenizer, tmp_path / "out")
    tokenize_files(inputs, tiny_tokenizer, tmp_path / "out", overwrite=True)
    slow = tmp_path / "slow"  # a tokenizer folder without tokenizer.json
    slow.mkdir()
    (slow / "tokenizer_config.json").write_text(json.dumps({"eos_token": EOS}))
    with pytest.raises(DataError, match="writing datatrove shards needs a tokenizer.json"):
        tokenize_files(inputs, slow, tmp_path / "out4")
    assert not list((tmp_path / "out4").iterdir())
    bare = write_wordlevel_tokenizer(tmp_path / "bare", 10)
    (bare / "tokenizer_config.json").write_text("{}")
    with pytest.raises(DataError, match="no eos_token in tokenizer_config.json"):
        tokenize_files(inputs, bare, tmp_path / "out2")
    with pytest.raises(DataError, match="no such file, folder or glob match"):
        tokenize_files([str(tmp_path / "nothing*.jsonl")], tiny_tokenizer, tmp_path / "out3")


def test_eos_id_from_tokenizer_files(tiny_tokenizer: Path, tmp_path: Path) -> None:
    assert eos_id_from_tokenizer(tiny_tokenizer) == 0
    assert eos_id_from_tokenizer(tiny_tokenizer / "tokenizer.json") == 0
    assert eos_id_from_tokenizer(write_wordlevel_tokenizer(tmp_path / "w", 100)) == 99
    assert eos_id_from_tokenizer(tmp_path / "missing") is None


def test_command_line(tmp_path: Path, tiny_tokenizer: Path) -> None:
    inputs = _jsonl(tmp_path / "in", [corpus_texts(20), corpus_texts(5, seed=9)])
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
        "--backend",
        "builtin",
        "--eos-token",
        EOS,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "wrote 2 shards, 25 documents" in done.stdout
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert again.returncode == 2 and "already holds" in again.stderr
