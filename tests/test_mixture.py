"""Weighted mixtures (proportions, per-source epochs, process slicing) and exact resume of every
kind of pipeline: one pool, mixtures, Megatron blends with splits, document fields, per_file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from data_fixtures import write_raw_megatron, write_raw_shard
from ml_collections import ConfigDict

from jaxtrain.config.loader import load_config
from jaxtrain.data.mixture import Interleave, quotas
from jaxtrain.data.pipeline import make_eval_batches, make_train_iterator
from jaxtrain.data.sources import parse_sources
from jaxtrain.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
SEQ = 4
BASE_B = 10_000  # source b's tokens count from here, so a row's first token names its source


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Counting data: datatrove a (0..160, 40 windows), datatrove b (10000..10080, 20 windows),
    and a Megatron dataset m (20000..20400 in documents of 10 tokens, EOS 0-free)."""
    root = tmp_path_factory.mktemp("mixture")
    write_raw_shard(root / "a", "00000_unshuffled.ds", [list(range(0, 161))], width=4)
    write_raw_shard(root / "b", "00000_unshuffled.ds", [list(range(BASE_B, BASE_B + 81))], width=4)
    write_raw_megatron(
        root / "m" / "m_text_document",
        [list(range(20_000 + 10 * i, 20_010 + 10 * i)) for i in range(40)],
        code=4,
    )
    return {"a": root / "a", "b": root / "b", "m": root / "m" / "m_text_document"}


def _cfg(**overrides: object) -> ConfigDict:
    values = {
        "data.kind": "datatrove",
        "train.seq_len": SEQ,
        "train.global_batch_size": 10,
        "data.prefetch": 2,
        **{k.replace("__", "."): v for k, v in overrides.items()},
    }
    return load_config(str(REPO / "configs" / "base.py"), values)


def _take(it, n: int) -> list[dict[str, np.ndarray]]:
    return [next(it) for _ in range(n)]


def test_interleave_tracks_the_weights_at_every_prefix() -> None:
    weights = [0.5, 0.3, 0.15, 0.05]
    it = Interleave(weights)
    assert quotas(weights).sum() == it.period
    positions = np.arange(3 * it.period + 123)
    source, index = it.locate(positions)
    for k, w in enumerate(weights):
        mine = source == k
        counts = np.cumsum(mine)
        assert np.max(np.abs(counts - (positions + 1) * w)) < 2
        # The index in the source's own stream is its running count: nothing skipped or repeated.
        np.testing.assert_array_equal(index[mine], np.arange(mine.sum()))
    with pytest.raises(Exception, match="below 1/65536"):
        Interleave([1.0, 1e-6])


def test_mixture_proportions_and_per_source_epochs(sources: dict[str, Path]) -> None:
    cfg = _cfg(data__paths=f"0.7:{sources['a']},0.3:{sources['b']}")
    batches = _take(make_train_iterator(cfg, 20_000), 200)
    firsts = np.concatenate([b["inputs"][:, 0] for b in batches])
    from_b = firsts >= BASE_B
    assert abs(int(from_b.sum()) - 0.3 * firsts.size) <= 2
    assert all(int((b["inputs"][:, 0] >= BASE_B).sum()) in (2, 3, 4) for b in batches)
    # Each source runs its own epochs: every 20 rows of b are a new permutation of its 20
    # windows, every 40 rows of a one of a's 40.
    b_windows = (firsts[from_b] - BASE_B) // SEQ
    a_windows = firsts[~from_b] // SEQ
    b_epochs = [b_windows[i : i + 20].tolist() for i in range(0, 580, 20)]
    assert all(sorted(e) == list(range(20)) for e in b_epochs)
    assert len({tuple(e) for e in b_epochs}) == len(b_epochs)
    assert all(sorted(a_windows[i : i + 40]) == list(range(40)) for i in range(0, 1360, 40))
    # data.weights says the same thing as weights inside data.paths.
    apart = _cfg(data__paths=f"{sources['a']},{sources['b']}", data__weights="0.7,0.3")
    for x, y in zip(batches[:5], _take(make_train_iterator(apart, 20_000), 5)):
        np.testing.assert_array_equal(x["inputs"], y["inputs"])


def test_mixture_order_is_the_documented_formula(sources: dict[str, Path]) -> None:
    """Row n comes from source k = Interleave.locate(n), at index j of k's own stream, and is
    window index_shuffle(j % len_k, seed=run.seed + j // len_k + k * SALT): the order that
    mixture checkpoints written by earlier versions point into."""
    from grain.experimental import index_shuffle

    from jaxtrain.data.mixture import SOURCE_SEED_SALT

    cfg = _cfg(data__paths=f"0.7:{sources['a']},0.3:{sources['b']}", run__seed=3)
    firsts = np.concatenate(
        [b["inputs"][:, 0] for b in _take(make_train_iterator(cfg, 20_000), 30)]
    )
    source, index = Interleave([0.7, 0.3]).locate(np.arange(firsts.size))
    lengths, bases = (40, 20), (0, BASE_B)
    expected = [
        bases[k]
        + SEQ
        * index_shuffle(
            j % lengths[k],
            max_index=lengths[k] - 1,
            seed=3 + j // lengths[k] + k * SOURCE_SEED_SALT,
            rounds=4,
        )
        for k, j in zip(source.tolist(), index.tolist())
    ]
    assert firsts.tolist() == expected


def test_mixture_rows_are_sliced_among_processes(sources: dict[str, Path]) -> None:
    cfg = _cfg(data__paths=f"0.7:{sources['a']},0.3:{sources['b']}")
    whole = _take(make_train_iterator(cfg, 20_000), 6)
    parts = [
        _take(make_train_iterator(cfg, 20_000, process_index=p, process_count=2), 6)
        for p in range(2)
    ]
    for step, batch in enumerate(whole):
        for key in batch:
            np.testing.assert_array_equal(
                np.concatenate([parts[0][step][key], parts[1][step][key]]), batch[key]
            )


def test_mixture_validation_is_fixed(sources: dict[str, Path]) -> None:
    cfg = _cfg(
        data__paths=f"{sources['a']}",
        train__eval_batches=3,
        data__val_paths=f"1:{sources['a']},1:{sources['b']}",
    )
    make = make_eval_batches(cfg, 20_000)
    first, second = list(make()), list(make())
    assert len(first) == 3
    rows = np.concatenate([b["inputs"][:, 0] for b in first])
    # Unshuffled: each source's windows in file order, interleaved half and half.
    np.testing.assert_array_equal(rows[rows < BASE_B], np.arange(15) * SEQ)
    np.testing.assert_array_equal(rows[rows >= BASE_B], BASE_B + np.arange(15) * SEQ)
    for x, y in zip(first, second):
        np.testing.assert_array_equal(x["inputs"], y["inputs"])


def test_weight_syntax_errors(sources: dict[str, Path]) -> None:
    a, b = sources["a"], sources["b"]
    with pytest.raises(ConfigError, match="either every entry has a weight or none"):
        parse_sources(f"0.7:{a},{b}", "datatrove")
    with pytest.raises(ConfigError, match="one number per data.paths entry"):
        parse_sources(f"{a},{b}", "datatrove", "1")
    with pytest.raises(ConfigError, match="are both set"):
        parse_sources(f"1:{a},1:{b}", "datatrove", "1,2")
    with pytest.raises(ConfigError, match="weight 0.0 .* must be a positive"):
        parse_sources(f"0:{a},1:{b}", "datatrove")
    assert parse_sources(r"C:\data\a", "datatrove")[0].weight is None  # not a weight


RESUMABLE = {
    "pool": dict(),
    "per_file": dict(data__windowing="per_file"),
    "mixture": dict(data__paths="0.6:{a},0.4:{b}"),
    "megatron_blend_split_documents": dict(
        data__kind="megatron",
        data__paths="0.5 {m} 0.5 {m}",
        data__split="90,10,0",
        data__reset_attention_mask=True,
        data__reset_position_ids=True,
        data__eod_mask_loss=True,
    ),
}


@pytest.mark.parametrize("name", sorted(RESUMABLE))
def test_exact_resume_from_json_state(sources: dict[str, Path], name: str) -> None:
    overrides = {"data__paths": str(sources["a"]), **RESUMABLE[name]}
    overrides["data__paths"] = overrides["data__paths"].format(**sources)
    cfg = _cfg(**overrides)
    straight = _take(make_train_iterator(cfg, 30_000), 17)
    it = make_train_iterator(cfg, 30_000)
    _take(it, 9)
    state = json.loads(json.dumps(it.get_state()))  # what a checkpoint stores
    fresh = make_train_iterator(cfg, 30_000)
    fresh.set_state(state)
    for a, b in zip(straight[9:], _take(fresh, 8), strict=True):
        assert sorted(a) == sorted(b)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.slow  # worker processes start by importing jax: ~15 s on two cores
def test_worker_processes_resume_a_megatron_mixture(sources: dict[str, Path]) -> None:
    paths = f"0.7 {sources['m']} 0.3 {sources['m']}"
    plain = _cfg(data__kind="megatron", data__paths=paths, data__reset_attention_mask=True)
    expected = _take(make_train_iterator(plain, 30_000), 8)
    workers = _cfg(
        data__kind="megatron",
        data__paths=paths,
        data__reset_attention_mask=True,
        data__worker_count=2,
    )
    it = make_train_iterator(workers, 30_000)
    try:
        got = _take(it, 3)
        state = json.loads(json.dumps(it.get_state()))
        got += _take(it, 5)
    finally:
        it.close()
    resumed = make_train_iterator(workers, 30_000)
    try:
        resumed.set_state(state)
        got += _take(resumed, 5)
    finally:
        resumed.close()
    for a, b in zip(expected + expected[3:], got, strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_split_counts_documents_across_a_folders_shards(tmp_path: Path) -> None:
    # Three shards of four 5-token documents: tokens 0..59 in order.
    for k in range(3):
        write_raw_shard(
            tmp_path,
            f"{k:05d}_unshuffled.ds",
            [list(range(20 * k + 5 * i, 20 * k + 5 * i + 5)) for i in range(4)],
        )
    cfg = _cfg(
        data__paths=str(tmp_path),
        data__split="50,50,0",
        data__shuffle=False,
        train__global_batch_size=2,
        train__eval_batches=10,
    )
    train = np.concatenate([b["inputs"] for b in _take(make_train_iterator(cfg, 100), 3)])
    valid = np.concatenate([b["inputs"] for b in make_eval_batches(cfg, 100)()])
    # Documents 0..5 train (shard 0 and half of shard 1), documents 6..11 validate.
    np.testing.assert_array_equal(train.ravel(), np.arange(24))
    np.testing.assert_array_equal(valid.ravel(), np.arange(30, 54))
