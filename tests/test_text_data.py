"""data.kind="text": raw JSONL / Parquet / ArrayRecord files tokenized while training give the
batches of the same files tokenized first, resume exactly, and refuse bad lines by file and line."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from data_fixtures import corpus_texts
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from jaxtrain.configs import base

from jaxtrain.data import pipeline
from jaxtrain.data.errors import DataError
from jaxtrain.data.example_proto import bytes_features, encode_example
from jaxtrain.errors import ConfigError

sys.path.insert(0, str(REPO / "tools"))
import tokenize_corpus  # noqa: E402

VOCAB = 400  # the tiny tokenizer's


def _write_arrayrecord(path: Path, records: list[bytes]) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    writer = ArrayRecordWriter(str(path), "group_size:1")
    for r in records:
        writer.write(r)
    writer.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """300 documents over every file kind, in a folder whose sorted file order is a, b, c, d, e."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    root = tmp_path_factory.mktemp("text")
    texts = corpus_texts(300, seed=3)
    (root / "corpus").mkdir()
    c = root / "corpus"
    lines = [json.dumps({"text": t, "id": i}) for i, t in enumerate(texts[:60])]
    lines.insert(7, "")  # a blank line and an empty text are no documents
    lines.insert(9, json.dumps({"text": ""}))
    (c / "a.jsonl").write_text("\n".join(lines))  # no newline after the last line
    with gzip.open(c / "b.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts[60:120])
    raw = "".join(json.dumps({"text": t}) + "\n" for t in texts[120:160]).encode()
    (c / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
    pq.write_table(pa.table({"text": texts[160:220]}), c / "d.parquet", row_group_size=16)
    # ArrayRecord as MaxText's data holds it: serialized tf.train.Example records.
    examples = [encode_example({"text": [t.encode()]}) for t in texts[220:260]]
    _write_arrayrecord(c / "e.array_record-00000-of-00002", examples)
    _write_arrayrecord(c / "e.array_record-00001-of-00002", [t.encode() for t in texts[260:]])
    return root


@pytest.fixture(scope="module")
def shards(corpus: Path, tiny_tokenizer: Path) -> Path:
    """The same corpus tokenized first, in file order (tools/tokenize_corpus.py --no-shuffle)."""
    # tokenize_corpus reads JSONL (gz), Parquet and text; the .zst and ArrayRecord files' texts
    # go to it as JSONL with the same documents in the same order.
    inputs = corpus / "for_tokenizer"
    inputs.mkdir()
    texts = corpus_texts(300, seed=3)
    for name in ("a.jsonl", "b.jsonl.gz", "d.parquet"):
        (inputs / name).symlink_to(corpus / "corpus" / name)
    rows = "".join(json.dumps({"text": t}) + "\n" for t in texts[120:160])
    (inputs / "c.jsonl").write_text(rows)
    rows = "".join(json.dumps({"text": t}) + "\n" for t in texts[220:])
    (inputs / "e.jsonl").write_text(rows)
    out = corpus / "shards"
    args = ["--input", str(inputs), "--tokenizer", str(tiny_tokenizer), "--output", str(out)]
    assert tokenize_corpus.main([*args, "--no-shuffle", "--quiet"]) == 0
    return out


def text_config(paths: str, tokenizer: Path, **data):
    c = base.get_config()
    c.data.kind, c.data.paths, c.data.tokenizer = "text", paths, str(tokenizer)
    c.data.reset_attention_mask = c.data.reset_position_ids = c.data.eod_mask_loss = True
    c.train.seq_len, c.train.global_batch_size = 32, 4
    for key, value in data.items():
        c.data[key] = value
    return c


def assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_unshuffled_batches_are_those_of_the_corpus_tokenized_first(corpus, shards, tiny_tokenizer):
    raw = text_config(str(corpus / "corpus"), tiny_tokenizer, shuffle=False)
    tokenized = text_config(str(shards), tiny_tokenizer, shuffle=False)
    tokenized.data.kind = "datatrove"
    a = pipeline.make_train_iterator(raw, VOCAB)
    b = pipeline.make_train_iterator(tokenized, VOCAB)
    # Past the end of the first epoch: the dropped tail and next epoch agree too.
    for _ in range(120):
        assert_same(next(a), next(b))


def _example_class():
    """tf.train.Example's messages, built from their field numbers (example.proto, feature.proto)."""
    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(
        name="example_test.proto", package="tftest", syntax="proto3"
    )

    def msg(name, *fields):
        m = f.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            fd = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                fd.type_name = type_name
        return m

    R, O = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    msg("BytesList", ("value", 1, F.TYPE_BYTES, R, ""))
    msg("FloatList", ("value", 1, F.TYPE_FLOAT, R, ""))
    msg("Int64List", ("value", 1, F.TYPE_INT64, R, ""))
    feat = msg(
        "Feature",
        ("bytes_list", 1, F.TYPE_MESSAGE, O, ".tftest.BytesList"),
        ("float_list", 2, F.TYPE_MESSAGE, O, ".tftest.FloatList"),
        ("int64_list", 3, F.TYPE_MESSAGE, O, ".tftest.Int64List"),
    )
    feat.oneof_decl.add(name="kind")
    for fd in feat.field:
        fd.oneof_index = 0
    feats = msg("Features", ("feature", 1, F.TYPE_MESSAGE, R, ".tftest.Features.FeatureEntry"))
    entry = feats.nested_type.add(name="FeatureEntry")
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=O)
    entry.field.add(
        name="value", number=2, type=F.TYPE_MESSAGE, label=O, type_name=".tftest.Feature"
    )
    entry.options.map_entry = True
    msg("Example", ("features", 1, F.TYPE_MESSAGE, O, ".tftest.Features"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tftest.Example"))


def test_examples_read_and_written_as_protobuf_does():
    """The hand decoder against protobuf's own serialization of tf.train.Example, other feature
    kinds (varints, packed floats) included, and the encoder read back by protobuf."""
    example = _example_class()
    e = example()
    e.features.feature["text"].bytes_list.value.append("café".encode())
    e.features.feature["n"].int64_list.value.extend([1, -5, 300])
    e.features.feature["f"].float_list.value.append(0.5)
    assert bytes_features(e.SerializeToString()) == {"n": [], "f": [], "text": ["café".encode()]}
    back = example()
    back.ParseFromString(encode_example({"text": [b"hi"], "id": [b"1", b"2"]}))
    assert list(back.features.feature["id"].bytes_list.value) == [b"1", b"2"]
    assert list(back.features.feature["text"].bytes_list.value) == [b"hi"]


def test_array_records_of_json_objects_read_as_jsonl(tmp_path, tiny_tokenizer):
    rows = [json.dumps({"body": t}) for t in corpus_texts(80, seed=9)]
    (tmp_path / "jsonl").mkdir()
    (tmp_path / "jsonl" / "a.jsonl").write_text("\n".join(rows))
    (tmp_path / "ar").mkdir()
    _write_arrayrecord(tmp_path / "ar" / "a.arrayrecord", [r.encode() for r in rows])
    a, b = (
        pipeline.make_train_iterator(
            text_config(str(tmp_path / name), tiny_tokenizer, text_key="body"), VOCAB
        )
        for name in ("jsonl", "ar")
    )
    for _ in range(8):
        assert_same(next(a), next(b))


def test_shuffled_order_resumes_exactly_with_any_worker_count(corpus, tiny_tokenizer):
    cfg = text_config(str(corpus / "corpus"), tiny_tokenizer, shuffle=True)
    first = pipeline.make_train_iterator(cfg, VOCAB)
    for _ in range(9):
        next(first)
    state = json.loads(json.dumps(first.get_state()))
    expected = [next(first) for _ in range(80)]  # across an epoch boundary
    cfg.data.worker_count = 2
    resumed = pipeline.make_train_iterator(cfg, VOCAB)
    resumed.set_state(state)
    for batch in expected:
        assert_same(batch, next(resumed))
    unshuffled = pipeline.make_train_iterator(
        text_config(str(corpus / "corpus"), tiny_tokenizer, shuffle=False), VOCAB
    )
    assert not np.array_equal(next(unshuffled)["inputs"], expected[0]["inputs"])


def test_every_state_through_an_epoch_end_resumes(corpus, tiny_tokenizer):
    cfg = text_config(str(corpus / "corpus" / "a.jsonl"), tiny_tokenizer)
    cfg.train.global_batch_size = 8
    it = pipeline.make_train_iterator(cfg, VOCAB)
    states, batches = [], []
    for _ in range(20):  # a.jsonl holds 5 batches of 8 x 32: three epoch ends
        states.append(json.loads(json.dumps(it.get_state())))
        batches.append(next(it))
    for state, batch in zip(states, batches):
        resumed = pipeline.make_train_iterator(cfg, VOCAB)
        resumed.set_state(state)
        assert_same(batch, next(resumed))


def test_processes_read_their_rows_of_the_global_batch(corpus, tiny_tokenizer):
    cfg = text_config(str(corpus / "corpus"), tiny_tokenizer)
    whole = pipeline.make_train_iterator(cfg, VOCAB)
    parts = [
        pipeline.make_train_iterator(cfg, VOCAB, process_index=p, process_count=2) for p in (0, 1)
    ]
    for _ in range(5):
        batch = next(whole)
        halves = [next(p) for p in parts]
        for k in batch:
            np.testing.assert_array_equal(batch[k], np.concatenate([h[k] for h in halves]))
    assert parts[0].get_state() == parts[1].get_state() == whole.get_state()


def test_mixture_with_tokenized_shards_resumes(corpus, shards, tiny_tokenizer):
    cfg = text_config(f"{corpus / 'corpus'},{shards}", tiny_tokenizer, weights="0.25,0.75")
    cfg.train.global_batch_size = 8
    it = pipeline.make_train_iterator(cfg, VOCAB)
    for _ in range(3):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    expected = [next(it) for _ in range(6)]
    again = pipeline.make_train_iterator(cfg, VOCAB)
    again.set_state(state)
    for batch in expected:
        assert_same(batch, next(again))


def test_validation_reads_val_paths_in_file_order(corpus, shards, tiny_tokenizer):
    cfg = text_config(str(corpus / "corpus"), tiny_tokenizer, val_paths=str(corpus / "corpus"))
    cfg.train.eval_batches = 3
    fresh = pipeline.make_eval_batches(cfg, VOCAB)
    first, second = list(fresh()), list(fresh())
    assert len(first) == 3
    tokenized = text_config(str(shards), tiny_tokenizer, shuffle=False)
    tokenized.data.kind = "datatrove"
    reference = pipeline.make_train_iterator(tokenized, VOCAB)
    for a, b in zip(first, second):
        assert_same(a, b)
        assert_same(a, next(reference))


def test_validation_text_shorter_than_a_batch_is_refused(tmp_path, corpus, tiny_tokenizer):
    (tmp_path / "val.jsonl").write_text('{"text": "too short"}\n')
    cfg = text_config(str(corpus / "corpus"), tiny_tokenizer, val_paths=str(tmp_path))
    cfg.train.eval_batches = 2
    with pytest.raises(DataError, match="hold fewer than one global batch of 4 windows"):
        list(pipeline.make_eval_batches(cfg, VOCAB)())


def test_a_wrong_text_key_is_refused_before_training(corpus, tiny_tokenizer):
    cfg = text_config(str(corpus / "corpus" / "a.jsonl"), tiny_tokenizer, text_key="content")
    with pytest.raises(DataError, match=r"a\.jsonl:1: no 'content' field \(fields: text, id\)"):
        pipeline.make_train_iterator(cfg, VOCAB)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_line_that_is_not_json_is_refused_with_file_and_line(tmp_path, tiny_tokenizer, workers):
    lines = [json.dumps({"text": t}) for t in corpus_texts(200)]
    lines[150] = '{"text": "cut'
    (tmp_path / "x.jsonl").write_text("\n".join(lines) + "\n")
    cfg = text_config(str(tmp_path), tiny_tokenizer, shuffle=False, worker_count=workers)
    it = pipeline.make_train_iterator(cfg, VOCAB)
    with pytest.raises(DataError, match=r"x\.jsonl:151: not a JSON object"):
        for _ in range(200):
            next(it)


def test_text_settings_are_checked(tmp_path, tiny_tokenizer):
    from jaxtrain.data.sources import validate_data_config

    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    cfg = text_config(str(tmp_path), tiny_tokenizer)
    cfg.data.tokenizer = ""
    with pytest.raises(ConfigError, match="needs data.tokenizer"):
        validate_data_config(cfg)
    cfg = text_config(str(tmp_path), tiny_tokenizer, split="99,1,0")
    with pytest.raises(ConfigError, match="data.split='99,1,0' is not applied to raw text"):
        validate_data_config(cfg)
    with pytest.raises(ConfigError, match="more than model.vocab_size=100"):
        pipeline.make_train_iterator(text_config(str(tmp_path), tiny_tokenizer), 100)
