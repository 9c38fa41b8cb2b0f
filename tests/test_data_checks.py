"""Bad input found before training: shards of another tokenizer, ids outside the vocabulary in
Megatron files, documents without EOS. (Damaged files: test_datatrove_reader, test_megatron.)"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
from data_fixtures import (
    DatatroveCorpus,
    write_raw_megatron,
    write_raw_shard,
    write_wordlevel_tokenizer,
)

from jaxtrain.config.loader import load_config
from jaxtrain.data import pipeline
from jaxtrain.data.errors import DataError
from jaxtrain.data.pipeline import make_eval_batches, make_train_iterator
from jaxtrain.data.tokenizer_check import check_tokenizer, short_name

REPO = Path(__file__).resolve().parent.parent


def _cfg(**overrides: object):
    values = {
        "data.kind": "datatrove",
        "train.seq_len": 8,
        "train.global_batch_size": 2,
        "data.prefetch": 0,
        **overrides,
    }
    return load_config(str(REPO / "configs" / "base.py"), values)


def test_shards_of_another_local_tokenizer_are_refused(
    tmp_path: Path, datatrove_corpus: DatatroveCorpus
) -> None:
    other = write_wordlevel_tokenizer(tmp_path / "other", 500)
    cfg = _cfg(**{"data.paths": str(datatrove_corpus.folder), "data.tokenizer": str(other)})
    with pytest.raises(
        DataError,
        match=r"_doc_shuffled\.ds: written with the tokenizer .*"
        r"tiny_tokenizer.*tokenizer\.json' \(400 tokens\), but "
        r"data\.tokenizer=.*other' \(500 tokens\) has another "
        r"vocabulary \(e\.g\. .*\)\. Set data\.tokenizer to",
    ):
        make_train_iterator(cfg, 1000)
    # A copy of the right tokenizer elsewhere is the same tokenizer: no error, no warning.
    copy = shutil.copytree(datatrove_corpus.tokenizer, tmp_path / "copy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_train_iterator(
            _cfg(**{"data.paths": str(datatrove_corpus.folder), "data.tokenizer": str(copy)}), 1000
        )


def test_tokenizer_names_that_cannot_be_compared_warn(tmp_path: Path, tiny_tokenizer: Path) -> None:
    hub = write_raw_shard(tmp_path / "a", "a.ds", [[1, 2, 0]], tokenizer="meta-llama/Llama-3-8B")
    placeholder = write_raw_shard(
        tmp_path / "b", "b.ds", [[1, 2, 0]], tokenizer="Unknown Tokenizer"
    )
    same_name = write_raw_shard(
        tmp_path / "c", "c.ds", [[1, 2, 0]], tokenizer="/elsewhere/tiny_tokenizer0/tokenizer.json"
    )
    from jaxtrain.data.datatrove import open_shard

    with pytest.warns(
        UserWarning,
        match=r"a\.ds: written with the tokenizer 'meta-llama/"
        r"Llama-3-8B', but data\.tokenizer is",
    ):
        check_tokenizer([open_shard(hub)], str(tiny_tokenizer))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_tokenizer([open_shard(placeholder)], str(tiny_tokenizer))
        check_tokenizer([open_shard(same_name)], str(tiny_tokenizer))
        check_tokenizer([open_shard(hub)], "")
    assert short_name("org/Model-7B") == "model-7b"
    assert short_name("/x/tok/tokenizer.json") == short_name("/y/tok/") == "tok"


def test_megatron_ids_outside_the_vocabulary(tmp_path: Path) -> None:
    prefix = write_raw_megatron(tmp_path / "p", [[1, 2, 3, 0], [4, -1, 5, 0]] * 3, code=4)
    cfg = _cfg(**{"data.kind": "megatron", "data.paths": str(prefix), "train.seq_len": 4})
    with pytest.raises(
        DataError,
        match=r"p\.bin: token id -1 at token 5 is outside the model's "
        r"vocab size 100 .*an unrecorded tokenizer",
    ):
        make_train_iterator(cfg, 100)


@pytest.mark.parametrize("workers", [0, 1])
def test_ids_past_the_start_up_scan_stop_the_batch_that_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    # A pool "too large" to scan whole: start-up reads only the first 16 tokens of each shard.
    monkeypatch.setattr(pipeline, "FULL_VOCAB_SCAN_TOKENS", 100)
    monkeypatch.setattr(pipeline, "HEAD_VOCAB_SCAN_TOKENS", 16)
    docs = [[1, 2, 3, 4, 5, 6, 7, 0]] * 16
    write_raw_shard(tmp_path / "d", "00000_unshuffled.ds", docs)
    late = [list(d) for d in docs]
    late[9][4] = 700  # token 76 of the second shard, past its scanned head
    write_raw_shard(tmp_path / "d", "00001_unshuffled.ds", late)
    cfg = _cfg(
        **{
            "data.paths": str(tmp_path / "d"),
            "data.shuffle": False,
            "data.worker_count": workers,
            "data.val_paths": str(tmp_path / "d"),
            "train.eval_batches": 100,
        }
    )
    it = make_train_iterator(cfg, 500)  # the start-up scan passes
    message = (
        r"00001_unshuffled\.ds: token id 700 at token 76 is outside the model's vocab "
        r"size 500 \(model\.vocab_size\)"
    )
    with pytest.raises(DataError, match=message):
        for _ in range(20):  # window 25 (batch 12) holds pool token 128 + 76
            next(it)
    with pytest.raises(DataError, match=message):
        list(make_eval_batches(cfg, 500)())


def test_negative_ids_past_the_scanned_head_stop_the_read(tmp_path: Path) -> None:
    from jaxtrain.data.megatron import open_megatron
    from jaxtrain.data.windows import TokenPool, WindowSource

    prefix = write_raw_megatron(tmp_path / "p", [[1, 2, 3, 0], [4, 5, 6, 0], [7, -1, 8, 0]], code=4)
    source = WindowSource(TokenPool([open_megatron(prefix)]), 3)
    assert source.validate_vocab(100, max_tokens_per_shard=4) == 3  # the head only
    assert source[0]["inputs"].tolist() == [1, 2, 3]
    with pytest.raises(DataError, match=r"p\.bin: token id -1 at token 9 is outside"):
        source[2]  # tokens 6..9


def test_megatron_without_eos_warns(tmp_path: Path, tiny_tokenizer: Path) -> None:
    prefix = write_raw_megatron(tmp_path / "p", [[5, 6, 7, 8]] * 8)
    cfg = _cfg(
        **{
            "data.kind": "megatron",
            "data.paths": str(prefix),
            "data.tokenizer": str(tiny_tokenizer),
            "train.seq_len": 4,
        }
    )
    with pytest.warns(UserWarning, match=r"p\.bin: no EOS token \(id 0\)"):
        make_train_iterator(cfg, 400)


def test_a_folder_without_shards_and_a_pool_shorter_than_a_window(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty: folder holds no \*\.ds shards"):
        make_train_iterator(_cfg(**{"data.paths": str(tmp_path / "empty")}), 100)
    write_raw_shard(tmp_path / "short", "a.ds", [[1, 2, 3, 0]])
    with pytest.raises(DataError, match=r"a\.ds hold 4 tokens in all, fewer than one window"):
        make_train_iterator(_cfg(**{"data.paths": str(tmp_path / "short")}), 100)
