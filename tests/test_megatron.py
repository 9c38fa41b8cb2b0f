"""Megatron indexed datasets: reading every dtype, bad files, our writer byte for byte against an
independent one, the tokenizer tool's `--format megatron`, blends, splits and validation."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from data_fixtures import MEGATRON_FORMATS, corpus_texts, write_raw_megatron
from ml_collections import ConfigDict

from jaxtrain.config.loader import load_config
from jaxtrain.data.errors import DataError
from jaxtrain.data.megatron import (
    MegatronWriter,
    dtype_for_vocab,
    megatron_files,
    merge_megatron,
    open_megatron,
)
from jaxtrain.data.pipeline import data_summary, make_eval_batches, make_train_iterator
from jaxtrain.data.sources import SourceSpec, load_datasets, parse_sources, parse_split
from jaxtrain.data.windows import TokenPool, WindowSource
from jaxtrain.errors import ConfigError
from jaxtrain.run import validate

REPO = Path(__file__).resolve().parent.parent
DOCS = [[5, 6, 7, 0], [8, 0], [9, 10, 11, 12, 13, 0], [14, 0]]


@pytest.mark.parametrize("code", sorted(MEGATRON_FORMATS))
def test_reads_every_dtype_code(tmp_path: Path, code: int) -> None:
    prefix = write_raw_megatron(tmp_path / "corpus_text_document", DOCS, code=code)
    (f,) = megatron_files(prefix)
    flat = [t for d in DOCS for t in d]
    assert f.dtype.itemsize == struct.calcsize(MEGATRON_FORMATS[code])
    assert f.num_tokens == len(flat) and f.num_docs == len(DOCS)
    np.testing.assert_array_equal(f.tokens, flat)
    np.testing.assert_array_equal(f.doc_ends, np.cumsum([len(d) for d in DOCS]))
    np.testing.assert_array_equal(TokenPool([f]).read(0, len(flat)), flat)
    # The path may name the prefix, either file, or the folder holding it.
    for path in (f"{prefix}.bin", f"{prefix}.idx", tmp_path):
        assert megatron_files(path)[0].num_tokens == len(flat)


def test_documents_grouping_several_sequences(tmp_path: Path) -> None:
    prefix = write_raw_megatron(tmp_path / "p", DOCS, doc_index=[0, 2, 4])
    f = open_megatron(prefix)
    np.testing.assert_array_equal(f.document_indices, [0, 2, 4])
    assert f.num_docs == 4  # sequences are the documents, as in Megatron's GPT dataset


def _damage(prefix: Path, how: str) -> None:
    idx, bin_ = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
    raw = bytearray(idx.read_bytes())
    if how == "magic":
        raw[:9] = b"NOTMEGAT\x00"
    elif how == "version":
        raw[9:17] = struct.pack("<Q", 2)
    elif how == "dtype code":
        raw[17] = 9
    elif how == "short bin":
        bin_.write_bytes(bin_.read_bytes()[:-2])
    elif how == "long bin":
        bin_.write_bytes(bin_.read_bytes() + b"\0\0")
    elif how == "truncated idx":
        raw = raw[:40]
    elif how == "pointers":
        raw[34 + 16 + 8 : 34 + 16 + 16] = struct.pack("<q", 2)  # sequence 1 starts at byte 2
    elif how == "negative length":  # lengths 8, -2, 6, 2 with pointers that agree with them
        raw[34:42] = struct.pack("<2i", 8, -2)
        raw[34 + 16 + 8 : 34 + 16 + 16] = struct.pack("<q", 16)
    elif how == "doc index":
        raw[-8:] = struct.pack("<q", 3)
    elif how == "no bin":
        bin_.unlink()
    elif how == "no idx":
        idx.unlink()
    if how not in ("no idx", "no bin"):
        idx.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    "how, message",
    [
        ("magic", r"p\.idx: not a Megatron index \(magic b'NOTMEGAT"),
        ("version", r"p\.idx: index version 2; only version 1"),
        ("dtype code", r"p\.idx: dtype code 9 does not exist \(known: 1 uint8"),
        ("short bin", r"p\.bin: 26 bytes, but p\.idx holds 4 sequences of 14 uint16 tokens = 28"),
        ("long bin", r"p\.bin: 30 bytes, but .* = 28 bytes"),
        ("truncated idx", r"p\.idx: 40 bytes, but its header announces 4 sequences"),
        (
            "pointers",
            r"p\.idx: sequence 1 starts at byte 2, but the lengths before it put it at "
            r"byte 8",
        ),
        ("negative length", r"p\.idx: sequence 1 has length -2; lengths are token counts"),
        ("doc index", r"p\.idx: the document index must rise from 0 to the sequence count 4"),
        ("no bin", r"p\.bin: missing"),
        ("no idx", r"p\.idx: missing"),
    ],
)
def test_bad_files_name_the_file_and_the_fix(tmp_path: Path, how: str, message: str) -> None:
    prefix = write_raw_megatron(tmp_path / "p", DOCS)
    _damage(prefix, how)
    with pytest.raises(DataError, match=message) as err:
        megatron_files(prefix)
    assert "preprocess_data.py" in str(err.value) or "copy" in str(err.value).lower()


def test_bad_paths(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty: folder holds no Megatron \*\.idx"):
        megatron_files(tmp_path / "empty")
    with pytest.raises(DataError, match=r"nothing: no such Megatron dataset"):
        megatron_files(tmp_path / "nothing")
    with pytest.raises(DataError, match=r"a\.ds: a datatrove shard, .*data\.kind='datatrove'"):
        megatron_files(tmp_path / "a.ds")


@pytest.mark.parametrize("dtype", ["<u2", "<i4", "<i8"])
def test_writer_matches_an_independent_writer_byte_for_byte(tmp_path: Path, dtype: str) -> None:
    writer = MegatronWriter(tmp_path / "ours", dtype)
    writer.add(DOCS[0])
    writer.add_many(DOCS[1:])
    writer.close()
    code = {"<u2": 8, "<i4": 4, "<i8": 5}[dtype]
    write_raw_megatron(tmp_path / "theirs", DOCS, code=code)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (
            tmp_path / f"theirs{suffix}"
        ).read_bytes()
    merged = merge_megatron([tmp_path / "ours", tmp_path / "theirs"], tmp_path / "both")
    np.testing.assert_array_equal(open_megatron(merged).tokens, [t for d in DOCS + DOCS for t in d])
    assert dtype_for_vocab(65499) == np.uint16 and dtype_for_vocab(65500) == np.int32


def _jsonl(folder: Path, parts: list[list[str]]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    for k, texts in enumerate(parts):
        with open(folder / f"part{k}.jsonl", "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    return [str(folder / "*.jsonl")]


def test_tokenize_megatron_format_reads_back(tmp_path: Path, tiny_tokenizer: Path) -> None:
    from jaxtrain.data.datatrove import find_shards
    from jaxtrain.data.tokenize import tokenize_files

    texts = corpus_texts(60, seed=5)
    inputs = _jsonl(tmp_path / "in", [texts[:40], texts[40:]])
    common = dict(tasks=2, workers=1, shuffle_documents=False)
    bins = tokenize_files(inputs, tiny_tokenizer, tmp_path / "meg", fmt="megatron", **common)
    assert [p.name for p in bins] == ["00000_text_document.bin", "00001_text_document.bin"]
    tokenize_files(inputs, tiny_tokenizer, tmp_path / "ds", **common)
    files, shards = megatron_files(tmp_path / "meg"), find_shards([str(tmp_path / "ds")])
    for f, s in zip(files, shards, strict=True):
        assert f.dtype == np.uint16  # vocab 400 < 65500
        np.testing.assert_array_equal(f.tokens, s.tokens)
        np.testing.assert_array_equal(f.doc_ends, s.doc_ends.astype(np.int64))
        # The same bytes an independent writer produces from the same documents.
        ends = np.r_[0, s.doc_ends.astype(np.int64)]
        docs = [np.asarray(s.tokens[a:b]).tolist() for a, b in zip(ends[:-1], ends[1:])]
        write_raw_megatron(tmp_path / "ref" / f.prefix.name, docs, code=8)
        for suffix in (".bin", ".idx"):
            assert (
                Path(f"{f.prefix}{suffix}").read_bytes()
                == (tmp_path / "ref" / f"{f.prefix.name}{suffix}").read_bytes()
            )
    merged = tokenize_files(
        inputs, tiny_tokenizer, tmp_path / "merged", fmt="megatron", merge=True, **common
    )
    assert [p.name for p in merged] == ["text_document.bin"]
    np.testing.assert_array_equal(
        open_megatron(merged[0]).tokens, np.concatenate([np.asarray(f.tokens) for f in files])
    )


def test_big_vocabulary_writes_int32(tmp_path: Path) -> None:
    from data_fixtures import write_wordlevel_tokenizer

    from jaxtrain.data.tokenize import tokenize_files

    tok = write_wordlevel_tokenizer(tmp_path / "tok", 70000)
    inputs = _jsonl(tmp_path / "in", [["w1 w65535 w65536", "w69997 w3"]])
    (bin_,) = tokenize_files(inputs, tok, tmp_path / "out", fmt="megatron", shuffle_documents=False)
    f = open_megatron(bin_)
    assert f.dtype == np.int32
    np.testing.assert_array_equal(f.tokens, [1, 65535, 65536, 69999, 69997, 3, 69999])


def test_blend_syntax() -> None:
    assert parse_sources("0.7 data/a 0.3 data/b", "megatron") == [
        SourceSpec("data/a", 0.7),
        SourceSpec("data/b", 0.3),
    ]
    assert parse_sources("data/a data/b", "megatron") == [
        SourceSpec("data/a"),
        SourceSpec("data/b"),
    ]
    assert parse_sources("2:data/a,1:data/b", "megatron") == [
        SourceSpec("data/a", 2.0),
        SourceSpec("data/b", 1.0),
    ]
    for bad in ("0.7 data/a 0.3", "0.7 data/a data/b 0.3"):
        with pytest.raises(ConfigError, match="alternates weights and prefixes"):
            parse_sources(bad, "megatron")
    with pytest.raises(ConfigError, match="weight -1.0 of 'data/b' must be a positive"):
        parse_sources("1 data/a -1 data/b", "megatron")


def test_split_matches_megatrons_rounding() -> None:
    assert parse_split("99,1,0") == [(0.0, 0.99), (0.99, 1.0), None]
    assert parse_split("") == [(0.0, 1.0), None, None]
    assert parse_split("98/2") == [(0.0, 0.98), (0.98, 1.0), None]
    bounds = parse_split("969, 30, 1")
    n = 1000  # Megatron: documents [round(lo * n), round(hi * n)) per part
    assert [(round(lo * n), round(hi * n)) for lo, hi in bounds] == [
        (0, 969),
        (969, 999),
        (999, 1000),
    ]
    for bad in ("1,2,3,4", "0,0,0", "train", "-5,1,0", "99,-1,2"):
        with pytest.raises(ConfigError, match="data.split"):
            parse_split(bad)


def _cfg(**overrides: object) -> ConfigDict:
    values = {
        "data.kind": "megatron",
        "train.seq_len": 4,
        "train.global_batch_size": 2,
        "data.prefetch": 0,
        "data.shuffle": False,
        **overrides,
    }
    return load_config(str(REPO / "configs" / "base.py"), values)


@pytest.fixture
def counting_datasets(tmp_path: Path) -> tuple[Path, Path]:
    """Two datasets of 20 documents of 5 counting tokens: a holds 0..99, b holds 1000..1099."""
    a = write_raw_megatron(
        tmp_path / "a_text_document", [list(range(5 * i, 5 * i + 5)) for i in range(20)], code=4
    )
    b = write_raw_megatron(
        tmp_path / "sub" / "b_text_document",
        [list(range(1000 + 5 * i, 1005 + 5 * i)) for i in range(20)],
        code=4,
    )
    return a, b


def test_split_carves_document_ranges_and_valid_part_validates(
    counting_datasets: tuple[Path, Path],
) -> None:
    a, b = counting_datasets
    (train,) = load_datasets([SourceSpec(str(a))], "megatron", "80,15,5", "train")
    (valid,) = load_datasets([SourceSpec(str(a))], "megatron", "80,15,5", "valid")
    (test,) = load_datasets([SourceSpec(str(a))], "megatron", "80,15,5", "test")
    assert (train.ranges, valid.ranges, test.ranges) == ([(0, 80)], [(80, 95)], [(95, 100)])

    # Training windows are the Megatron sampler's: seq_len + 1 tokens, stride seq_len, spanning
    # documents, over the train documents only.
    cfg = _cfg(
        **{
            "data.paths": f"{a},{b}",
            "data.split": "80,20,0",
            "train.eval_every": 2,
            "train.eval_batches": 100,
        }
    )
    validate(cfg)
    it = make_train_iterator(cfg, 2000)
    rows = np.concatenate([next(it)["inputs"] for _ in range(20)])
    train_tokens = np.r_[np.arange(80), np.arange(1000, 1080)]
    # One pool of both train parts: 159 // 4 = 39 windows, 19 batches of 2, then epoch 2.
    for i, row in enumerate(rows[:38]):
        np.testing.assert_array_equal(row, train_tokens[4 * i : 4 * i + 4])
    np.testing.assert_array_equal(rows[38], train_tokens[:4])
    evals = [b["inputs"] for b in make_eval_batches(cfg, 2000)()]
    valid_tokens = np.r_[np.arange(80, 100), np.arange(1080, 1100)]
    assert len(evals) == (40 - 1) // 4 // 2 and np.all(np.isin(np.concatenate(evals), valid_tokens))
    np.testing.assert_array_equal(evals[0][0], valid_tokens[:4])
    assert "val: 2 shards, 40 tokens" in data_summary(cfg)


def test_validation_from_val_paths_uses_whole_datasets(
    counting_datasets: tuple[Path, Path],
) -> None:
    a, b = counting_datasets
    cfg = _cfg(**{"data.paths": str(a), "data.val_paths": str(b), "data.split": "50,50,0"})
    evals = list(make_eval_batches(cfg, 2000)())
    np.testing.assert_array_equal(
        evals[0]["inputs"], [[1000, 1001, 1002, 1003], [1004, 1005, 1006, 1007]]
    )
    assert make_eval_batches(_cfg(**{"data.paths": str(a)}), 2000) is None
    with pytest.raises(ConfigError, match="no validation data"):
        validate(_cfg(**{"data.paths": str(a), "train.eval_every": 5}))


def test_pool_over_a_bin_and_per_file_windows(counting_datasets: tuple[Path, Path]) -> None:
    a, _ = counting_datasets
    source = WindowSource(TokenPool(megatron_files(a)), 7, "per_file")
    assert len(source) == 100 // 8
    np.testing.assert_array_equal(source[1]["inputs"], np.arange(8, 15))
    with pytest.raises(DataError, match="fewer than one window"):
        WindowSource(TokenPool(megatron_files(a)), 100)
