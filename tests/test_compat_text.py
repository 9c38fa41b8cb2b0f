"""The other stacks' data keys: MaxText's grain and local-HF pipelines and TorchTitan's local
dataset_path become raw-text data (data.kind="text"); TFDS and Hub datasets are refused by name."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import pytest
from data_fixtures import corpus_texts

from jaxtrain import compat
from jaxtrain.data.example_proto import encode_example
from jaxtrain.trainer import Trainer

TINY_MAXTEXT = """base_config: base.yml
run_name: tiny
decoder_block: llama2
base_emb_dim: 64
base_num_query_heads: 4
base_num_kv_heads: 4
base_mlp_dim: 128
base_num_decoder_layers: 2
head_dim: 16
vocab_size: 512
max_target_length: 32
per_device_batch_size: 1
steps: 3
enable_checkpointing: false
add_bos: false
"""


@pytest.fixture
def maxtext_root(compat_samples) -> str:
    return str(compat_samples / "maxtext")


def _array_records(folder: Path) -> Path:
    """Two ArrayRecord shards of tf.train.Example records, named as MaxText's C4 files are."""
    from array_record.python.array_record_module import ArrayRecordWriter

    folder.mkdir()
    for k in range(2):
        writer = ArrayRecordWriter(str(folder / f"c4-train.array_record-0000{k}-of-00002"), "")
        for text in corpus_texts(100, seed=k):
            writer.write(encode_example({"text": [text.encode()]}))
        writer.close()
    return folder


def _load(path: Path, root: str, tmp_path: Path, allow_unsupported: bool = True):
    return compat.load_foreign(
        path,
        {"run.dir": str(tmp_path / "run"), "train.progress": False},
        allow_unsupported,
        env={"NNODES": "1", "GPUS_PER_NODE": "1"},
        maxtext_root=root,
    )


def test_maxtext_grain_over_local_array_records_trains(tmp_path, maxtext_root, tiny_tokenizer):
    files = _array_records(tmp_path / "c4")
    path = tmp_path / "grain.yml"
    path.write_text(
        TINY_MAXTEXT + f"dataset_type: grain\ngrain_train_files: {files}/c4-train.array_record*\n"
        f"grain_file_type: arrayrecord\ngrain_worker_count: 1\ntokenizer_path: {tiny_tokenizer}\n"
    )
    cfg, report = _load(path, maxtext_root, tmp_path, allow_unsupported=False)
    assert report.entries["dataset_type"].status == "mapped"
    assert (cfg.data.kind, cfg.data.worker_count, cfg.data.text_key) == ("text", 1, "text")
    assert cfg.data.paths.split(",") == [str(p) for p in sorted(files.iterdir())]
    assert cfg.data.reset_attention_mask and cfg.data.reset_position_ids  # packing: true
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    try:
        trainer.run()
        assert trainer.step == 3
        assert all(math.isfinite(h["loss"]) for h in trainer.history)
    finally:
        trainer.close()


def test_maxtext_data_keys_are_reported(tmp_path, maxtext_root, tiny_tokenizer):
    path = tmp_path / "tfds.yml"
    path.write_text(TINY_MAXTEXT + "dataset_type: tfds\n")
    _, report = _load(path, maxtext_root, tmp_path)
    entry = report.entries["dataset_type"]
    assert entry.status == "unsupported" and "TFDS pipelines are not read" in entry.reason

    (tmp_path / "json").mkdir()
    rows = "".join(json.dumps({"content": t}) + "\n" for t in corpus_texts(20))
    (tmp_path / "json" / "train.jsonl").write_text(rows)
    path = tmp_path / "hf.yml"
    path.write_text(
        TINY_MAXTEXT.replace("add_bos: false\n", "")
        + f"dataset_type: hf\nhf_path: json\nhf_train_files: {tmp_path}/json/*.jsonl\n"
        f"train_data_columns: ['content']\ntokenizer_path: {tiny_tokenizer}\npacking: false\n"
    )
    cfg, report = _load(path, maxtext_root, tmp_path)
    assert (cfg.data.kind, cfg.data.paths) == ("text", str(tmp_path / "json" / "train.jsonl"))
    assert cfg.data.text_key == "content"
    status = {k: report.entries[k].status for k in ("hf_path", "hf_train_files", "add_bos")}
    assert status == {"hf_path": "mapped", "hf_train_files": "mapped", "add_bos": "unsupported"}
    assert report.entries["packing"].status == "unsupported"

    path.write_text(TINY_MAXTEXT + "dataset_type: hf\nhf_path: allenai/c4\n")
    _, report = _load(path, maxtext_root, tmp_path)
    entry = report.entries["hf_path"]
    assert entry.status == "unsupported" and "not downloaded" in entry.reason


def test_torchtitan_local_dataset_path_is_raw_text(tmp_path, compat_samples):
    sample = next((compat_samples / "torchtitan").rglob("debug_model.toml"))
    (tmp_path / "c4_test").mkdir()
    rows = "".join(json.dumps({"text": t}) + "\n" for t in corpus_texts(20))
    (tmp_path / "c4_test" / "c4.json").write_text(rows)
    cfg, report = compat.load_foreign(
        sample,
        {"run.dir": str(tmp_path / "run")},
        True,
        env={},
        native_overrides=[f"training.dataset_path={tmp_path / 'c4_test'}"],
    )
    assert (cfg.data.kind, cfg.data.paths) == ("text", str(tmp_path / "c4_test"))
    assert report.entries["training.dataset_path"].status == "mapped"
