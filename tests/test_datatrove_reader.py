"""The datatrove shard reader and the token pool / windows, checked against raw bytes."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
from data_fixtures import DatatroveCorpus, raw_tokens, write_raw_shard

from jaxtrain.data import datatrove
from jaxtrain.data.datatrove import find_shards, open_shard
from jaxtrain.data.errors import DataError
from jaxtrain.data.windows import TokenPool, WindowSource


def test_reads_datatrove_output(datatrove_corpus: DatatroveCorpus) -> None:
    files = sorted(datatrove_corpus.folder.glob("*.ds"))
    empty = [f for f in files if f.stat().st_size == 0]
    assert empty, "three tasks over two files should leave one empty shard"
    shards = find_shards([str(datatrove_corpus.folder)])
    assert [s.path for s in shards] == [f for f in files if f not in empty]
    assert all(s.path.name.endswith("_doc_shuffled.ds") for s in shards)
    for s in shards:
        assert s.dtype == np.uint16
        assert s.tokenizer_name.endswith("tokenizer.json")
        np.testing.assert_array_equal(s.tokens, raw_tokens(s.path))
        ends = np.fromfile(s.path.with_name(s.path.name + ".index"), "<u8")
        np.testing.assert_array_equal(s.doc_ends, ends)
        assert s.num_tokens == ends[-1]
        # datatrove appended one EOS after every document.
        assert np.all(np.asarray(s.tokens)[ends.astype(np.int64) - 1] == datatrove_corpus.eos_id)
    assert sum(s.num_docs for s in shards) == len(datatrove_corpus.texts)


def test_windows_match_numpy_reading(datatrove_corpus: DatatroveCorpus) -> None:
    shards = find_shards([str(datatrove_corpus.folder)])
    expected = np.concatenate([raw_tokens(s.path) for s in shards])
    seq_len = 37
    source = WindowSource(TokenPool(shards), seq_len)
    assert len(source.pool) == expected.size
    assert len(source) == (expected.size - 1) // seq_len
    boundary = shards[0].num_tokens
    spanning = boundary // seq_len  # the window that starts before the first boundary and crosses
    assert spanning * seq_len < boundary < spanning * seq_len + seq_len + 1
    for i in {0, 1, spanning, len(source) // 2, len(source) - 1}:
        item = source[i]
        window = expected[i * seq_len : i * seq_len + seq_len + 1]
        np.testing.assert_array_equal(item["inputs"], window[:-1])
        np.testing.assert_array_equal(item["targets"], window[1:])
        assert item["inputs"].dtype == np.int32 and item["loss_mask"].dtype == np.float32
        assert np.all(item["loss_mask"] == 1)
    with pytest.raises(IndexError):
        source[len(source)]


def test_windows_span_several_shards(tmp_path: Path) -> None:
    sizes = (5, 2, 1, 9, 4)  # shards shorter than a window too
    start = 0
    for k, n in enumerate(sizes):
        write_raw_shard(tmp_path, f"{k:05d}_unshuffled.ds", [list(range(start, start + n))])
        start += n
    pool = TokenPool(find_shards([str(tmp_path)]))
    assert len(pool) == sum(sizes)
    np.testing.assert_array_equal(pool.read(0, len(pool)), np.arange(len(pool)))
    np.testing.assert_array_equal(pool.read(4, 6), np.arange(4, 10))  # four shards at once
    assert pool.read(3, 0).size == 0
    with pytest.raises(IndexError):
        pool.read(len(pool) - 2, 3)
    source = WindowSource(pool, 4)
    assert len(source) == (sum(sizes) - 1) // 4  # the 1-token tail is dropped
    for i in range(len(source)):
        np.testing.assert_array_equal(source[i]["inputs"], np.arange(4 * i, 4 * i + 4))
        np.testing.assert_array_equal(source[i]["targets"], np.arange(4 * i + 1, 4 * i + 5))


def test_uint32_shard_and_vocab_check(tmp_path: Path) -> None:
    docs = [[70000, 5, 131071], [65536, 1, 2, 99999, 0]]
    ds = write_raw_shard(tmp_path, "00000_unshuffled.ds", docs, width=4, tokenizer="big/tok.json")
    (shard,) = find_shards([str(ds)])
    assert shard.dtype == np.uint32 and shard.tokenizer_name == "big/tok.json"
    pool = TokenPool([shard])
    np.testing.assert_array_equal(pool.read(0, 8), [t for d in docs for t in d])
    assert pool.validate_vocab(131072) == 131071
    with pytest.raises(DataError, match=r"unshuffled\.ds: token id 131071 at token 2 .*100000"):
        WindowSource(pool, 4).validate_vocab(100000)


def test_loss_mask_comes_from_target_tokens(tmp_path: Path) -> None:
    loss = [1, 1, 0, 0, 1, 0, 1, 1, 1]
    write_raw_shard(tmp_path, "a.ds", [list(range(9))], loss=loss)
    write_raw_shard(tmp_path, "b.ds", [list(range(9, 14))])  # no .loss: ones
    source = WindowSource(TokenPool(find_shards([str(tmp_path)])), 4)
    np.testing.assert_array_equal(source[0]["loss_mask"], [1, 0, 0, 1])
    np.testing.assert_array_equal(source[1]["loss_mask"], [0, 1, 1, 1])
    np.testing.assert_array_equal(source[2]["loss_mask"], [1, 1, 1, 1])


def test_shard_pickles_without_its_tokens(tmp_path: Path) -> None:
    ds = write_raw_shard(tmp_path, "a.ds", [list(range(5000))])
    shard = open_shard(ds)
    _ = shard.tokens[:10]  # map it first
    blob = pickle.dumps(shard)
    assert len(blob) < 2000
    np.testing.assert_array_equal(pickle.loads(blob).tokens[-3:], [4997, 4998, 4999])


def test_eos_warning(tmp_path: Path) -> None:
    with_eos = write_raw_shard(tmp_path / "a", "a.ds", [[5, 6, 0], [7, 0]])
    without = write_raw_shard(tmp_path / "b", "b.ds", [[5, 6], [7, 8]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        find_shards([str(with_eos)], eos_id=0)
    with pytest.warns(UserWarning, match=r"b\.ds: no EOS token \(id 0\)"):
        find_shards([str(without)], eos_id=0)


def _damage(tmp_path: Path, how: str) -> Path:
    ds = write_raw_shard(tmp_path, "00003_unshuffled.ds", [[1, 2, 3], [4, 5]])
    index, metadata = (ds.with_name(ds.name + s) for s in (".index", ".metadata"))
    if how == "no index":
        index.unlink()
    elif how == "no metadata":
        metadata.unlink()
    elif how == "truncated":
        ds.write_bytes(ds.read_bytes()[:-2])
    elif how == "index mismatch":
        index.write_bytes(np.array([3, 4], "<u8").tobytes())
    elif how == "index past the end":
        index.write_bytes(np.array([2, 7, 3, 5], "<u8").tobytes())
    elif how == "index decreasing":
        index.write_bytes(np.array([1, 4, 3, 5], "<u8").tobytes())
    elif how == "width":
        metadata.write_text("tok|3\n5\n5 T")
    elif how == "metadata garbage":
        metadata.write_text("hello")
    elif how == "metadata not utf-8":
        metadata.write_bytes(b"tok\xff\xfe|2\n5\n")
    return ds


@pytest.mark.parametrize(
    "how, message",
    [
        ("no index", r"00003_unshuffled\.ds: its companion file 00003_\w+\.ds\.index is missing"),
        ("no metadata", r"00003_unshuffled\.ds\.metadata is missing"),
        ("truncated", r"00003_unshuffled\.ds: 8 bytes, but .* 5 tokens of 2 bytes = 10 bytes"),
        (
            "index mismatch",
            r"00003_unshuffled\.ds\.index: the last document ends at token 4, but .* 5",
        ),
        (
            "index past the end",
            r"00003_unshuffled\.ds\.index: document 1 ends at token 7, past the "
            r"5 tokens of 00003_unshuffled\.ds; the index is damaged",
        ),
        (
            "index decreasing",
            r"00003_unshuffled\.ds\.index: document 2 ends at token 3, before the "
            r"document ahead of it \(at 4\); document ends never decrease",
        ),
        ("width", r"00003_unshuffled\.ds\.metadata: unknown token width 3 bytes"),
        ("metadata garbage", r"00003_unshuffled\.ds\.metadata: malformed"),
        (
            "metadata not utf-8",
            r"00003_unshuffled\.ds\.metadata: malformed datatrove metadata "
            r"\['tok\\udcff\\udcfe\|2', '5'\]",
        ),
    ],
)
def test_bad_shards_name_the_file(tmp_path: Path, how: str, message: str) -> None:
    ds = _damage(tmp_path, how)
    with pytest.raises(DataError, match=message):
        find_shards([str(tmp_path)])
    with pytest.raises(DataError, match=message):
        find_shards([str(ds)])


def test_index_is_checked_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datatrove, "INDEX_CHUNK", 2)
    ds = write_raw_shard(tmp_path, "a.ds", [[1], [2, 3, 4], [], [5]])  # ends 1, 4, 4, 5
    assert find_shards([str(ds)])[0].num_docs == 4
    ds.with_name("a.ds.index").write_bytes(np.array([1, 4, 3, 5], "<u8").tobytes())
    with pytest.raises(DataError, match=r"document 2 ends at token 3, before .* \(at 4\)"):
        find_shards([str(ds)])


def test_bad_paths(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty: folder holds no \*\.ds shards"):
        find_shards([str(tmp_path / "empty")])
    write_raw_shard(tmp_path / "nested" / "inner", "a.ds", [[1, 2]])
    with pytest.raises(DataError, match="subfolder 'inner'"):
        find_shards([str(tmp_path / "nested")])
    with pytest.raises(DataError, match="missing_dir: no such file or folder"):
        find_shards([str(tmp_path / "missing_dir")])
    with pytest.raises(DataError, match=r"a\.ds\.index: not a datatrove shard"):
        find_shards([str(tmp_path / "nested" / "inner" / "a.ds.index")])
    for k in range(2):
        write_raw_shard(tmp_path / "zeros", f"{k:05d}_unshuffled.ds", [])
    with pytest.raises(DataError, match=r"all 2 shards under .*zeros are empty"):
        find_shards([str(tmp_path / "zeros")])


def test_pool_shorter_than_a_window(tmp_path: Path) -> None:
    write_raw_shard(tmp_path, "a.ds", [[1, 2, 3, 4]])
    pool = TokenPool(find_shards([str(tmp_path)]))
    assert len(WindowSource(pool, 3)) == 1
    with pytest.raises(DataError, match=r"a\.ds hold 4 tokens in all, .* seq_len \+ 1 = 5"):
        WindowSource(pool, 4)
