"""Document boundaries (segment ids, positions, EOD loss mask) and the per_file windowing.

References: a brute-force per-token document id, datatrove's own `DatatroveFolderDataset` (its
windows and its `positions`), and the model itself (a packed row gives each document the logits
it has alone).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from data_fixtures import DatatroveCorpus, write_raw_shard

from jaxtrain.config.loader import load_config
from jaxtrain.data.datatrove import find_shards
from jaxtrain.data.documents import DocumentOptions, boundary_fields
from jaxtrain.data.errors import DataError
from jaxtrain.data.pipeline import make_train_iterator
from jaxtrain.data.windows import TokenPool, WindowSource

REPO = Path(__file__).resolve().parent.parent
ALL = DocumentOptions(True, True, True)


def test_boundary_fields_by_hand() -> None:
    # Documents start at offsets 3 and 5 of an 8-token row, and one right after the row (8).
    fields, keep = boundary_fields(np.array([3, 5, 8]), 8, ALL)
    np.testing.assert_array_equal(fields["segment_ids"], [1, 1, 1, 2, 2, 3, 3, 3])
    np.testing.assert_array_equal(fields["positions"], [0, 1, 2, 0, 1, 0, 1, 2])
    np.testing.assert_array_equal(keep, [1, 1, 0, 1, 0, 1, 1, 0])
    fields, keep = boundary_fields(np.zeros(0, np.int64), 4, DocumentOptions(True, False, False))
    assert list(fields) == ["segment_ids"] and keep is None
    np.testing.assert_array_equal(fields["segment_ids"], [1, 1, 1, 1])


def _reference(doc_of_token: np.ndarray, start: int, seq_len: int) -> dict[str, np.ndarray]:
    """Fields of the window at `start` from a per-token document id, token by token."""
    ids = doc_of_token[start : start + seq_len + 1]
    segment = ids[:-1] - ids[0] + 1
    positions = np.array([t - int(np.argmax(ids[:-1] == ids[t])) for t in range(seq_len)])
    keep = (ids[:-1] == ids[1:]).astype(np.float32)
    return {"segment_ids": segment, "positions": positions, "loss_mask": keep}


@pytest.mark.parametrize("windowing", ["pool", "per_file"])
def test_fields_match_a_token_by_token_reference(
    datatrove_corpus: DatatroveCorpus, windowing: str
) -> None:
    shards = find_shards([str(datatrove_corpus.folder)])
    pool = TokenPool(shards)
    lengths = np.concatenate([np.diff(np.r_[0, s.doc_ends.astype(np.int64)]) for s in shards])
    doc_of_token = np.repeat(np.arange(lengths.size), lengths)
    source = WindowSource(pool, 24, windowing, ALL)
    eos = datatrove_corpus.eos_id
    crossed = 0
    for i in range(len(source)):
        item, start = source[i], source.window_start(i)
        expected = _reference(doc_of_token, start, 24)
        for key, value in expected.items():
            np.testing.assert_array_equal(item[key], value, err_msg=f"{key} of window {i}")
        assert item["segment_ids"].dtype == item["positions"].dtype == np.int32
        # Every document ends with its EOS: masked inputs are exactly the EOS tokens
        # (Megatron's `loss_mask[data == eod] = 0`).
        np.testing.assert_array_equal(item["loss_mask"] == 0, item["inputs"] == eos)
        crossed += int(item["segment_ids"][-1] > 1)
    assert crossed > len(source) // 2  # documents are shorter than windows: most rows pack


def test_per_file_windows_and_positions_match_datatrove(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from datatrove.utils.dataset import DatatroveFolderDataset

    rng = np.random.default_rng(0)
    for k, n_docs in enumerate((7, 1, 12)):
        docs = [list(rng.integers(1, 50, int(rng.integers(2, 9)))) + [0] for _ in range(n_docs)]
        write_raw_shard(tmp_path, f"{k:05d}_unshuffled.ds", docs)
    seq_len = 6
    theirs = DatatroveFolderDataset(
        str(tmp_path),
        seq_len,
        filename_pattern="*.ds",
        recursive=False,
        token_size=2,
        return_positions=True,
    )
    ours = WindowSource(
        TokenPool(find_shards([str(tmp_path)])),
        seq_len,
        "per_file",
        DocumentOptions(reset_position_ids=True),
    )
    assert len(ours) == len(theirs) > 0
    for i in range(len(ours)):
        reference = {k: v.numpy() for k, v in theirs[i].items()}
        np.testing.assert_array_equal(ours[i]["inputs"], reference["input_ids"][:-1])
        np.testing.assert_array_equal(ours[i]["targets"], reference["input_ids"][1:])
        np.testing.assert_array_equal(ours[i]["positions"], reference["positions"][:-1])
    pool_mode = WindowSource(TokenPool(find_shards([str(tmp_path)])), seq_len)
    assert len(pool_mode) > len(ours)  # the pool wastes at most one tail in all


def test_per_file_needs_one_file_with_a_window(tmp_path: Path) -> None:
    write_raw_shard(tmp_path, "a.ds", [[1, 2, 3, 0]])
    write_raw_shard(tmp_path, "b.ds", [[4, 5, 6, 0]])
    pool = TokenPool(find_shards([str(tmp_path)]))
    assert len(WindowSource(pool, 6)) == 1
    with pytest.raises(
        DataError,
        match=r"no file of .*a\.ds, .*b\.ds holds one window of "
        r"seq_len \+ 1 = 7 tokens \(the largest holds 4\)",
    ):
        WindowSource(pool, 6, "per_file")


def test_pipeline_emits_the_fields_and_the_model_isolates_documents(
    datatrove_corpus: DatatroveCorpus,
) -> None:
    from jaxtrain.models import build_model
    from jaxtrain.models.spec.hyperparameters import ModelSpec

    cfg = load_config(
        str(REPO / "configs" / "base.py"),
        {
            "data.kind": "datatrove",
            "data.paths": str(datatrove_corpus.folder),
            "train.seq_len": 32,
            "train.global_batch_size": 4,
            "data.reset_attention_mask": True,
            "data.reset_position_ids": True,
        },
    )
    batch = next(make_train_iterator(cfg, 400))
    assert sorted(batch) == ["inputs", "loss_mask", "positions", "segment_ids", "targets"]
    row = int(np.argmax(batch["segment_ids"].max(axis=1)))
    seg = batch["segment_ids"][row]
    assert seg.max() >= 2
    spec = ModelSpec(
        vocab_size=400,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        intermediate_size=64,
        max_seq_len=64,
    )
    model = build_model(spec)
    packed = model(
        jnp.asarray(batch["inputs"][row : row + 1]),
        jnp.asarray(batch["positions"][row : row + 1]),
        jnp.asarray(seg[None]),
    )
    for doc in range(1, int(seg.max()) + 1):
        cols = np.flatnonzero(seg == doc)
        alone = model(jnp.asarray(batch["inputs"][row : row + 1, cols]))
        np.testing.assert_allclose(packed[:, cols], alone, atol=2e-5)


def test_trainer_trains_on_a_megatron_blend_with_boundaries_and_split_validation(
    tmp_path: Path, datatrove_corpus: DatatroveCorpus
) -> None:
    from jaxtrain.data.megatron import MegatronWriter
    from jaxtrain.trainer import Trainer

    prefixes = []
    for k, shard in enumerate(find_shards([str(datatrove_corpus.folder)])):
        ends = np.r_[0, shard.doc_ends.astype(np.int64)]
        writer = MegatronWriter(tmp_path / f"part{k}_text_document", np.uint16)
        writer.add_many([shard.tokens[a:b] for a, b in zip(ends[:-1], ends[1:])])
        prefixes.append(str(writer.close()))
    cfg = load_config(
        str(REPO / "configs" / "llama_debug.py"),
        {
            "run.dir": str(tmp_path / "run"),
            "data.kind": "megatron",
            "data.paths": f"0.6 {prefixes[0]} 0.4 {prefixes[1]}",
            "data.split": "90,10,0",
            "data.tokenizer": str(datatrove_corpus.tokenizer),
            "train.seq_len": 32,
            "train.global_batch_size": 8,
            "train.steps": 2,
            "train.log_every": 1,
            "train.eval_every": 2,
            "train.eval_batches": 2,
            "train.progress": False,
            "checkpoint.every": 0,
            "data.reset_attention_mask": True,
            "data.reset_position_ids": True,
            "data.eod_mask_loss": True,
        },
    )
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    try:
        trainer.run()
        history = trainer.history
    finally:
        trainer.close()
    assert [np.isfinite(h["loss"]) for h in history] == [True, True]
    # The EOD mask removes one target per document end from the 8 x 32 tokens of a step.
    assert all(h["tokens"] < 8 * 32 for h in history)
    assert np.isfinite(history[-1]["val_loss"])  # the valid part of data.split validates
