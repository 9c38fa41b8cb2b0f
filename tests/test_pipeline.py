"""The grain pipeline: epoch order, process slicing, exact resume, eval batches, synthetic data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from data_fixtures import DatatroveCorpus, write_raw_shard
from ml_collections import ConfigDict

from jaxtrain.config.loader import load_config
from jaxtrain.data.errors import DataError
from jaxtrain.data.pipeline import data_summary, make_eval_batches, make_train_iterator
from jaxtrain.data.synthetic import SyntheticSource
from jaxtrain.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
SEQ = 4


@pytest.fixture(scope="module")
def base_cfg() -> ConfigDict:
    """configs/base.py, loaded once."""
    return load_config(str(REPO / "configs" / "base.py"))


def _cfg(base: ConfigDict, **overrides: object) -> ConfigDict:
    cfg = ConfigDict(base.to_dict())
    values = {
        "data.kind": "datatrove",
        "train.seq_len": SEQ,
        "train.global_batch_size": 4,
        "data.prefetch": 2,
        **{k.replace("__", "."): v for k, v in overrides.items()},
    }
    for key, value in values.items():
        section, leaf = key.split(".")
        cfg[section][leaf] = value
    return cfg


@pytest.fixture(scope="module")
def counting_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two uint32 shards whose tokens count 0, 1, 2, ...: window i starts with token i * SEQ.

    161 tokens -> 40 windows of 5 tokens, 10 global batches of 4 per epoch.
    """
    folder = tmp_path_factory.mktemp("counting")
    write_raw_shard(folder, "00000_unshuffled.ds", [list(range(0, 70))], width=4)
    write_raw_shard(folder, "00001_unshuffled.ds", [list(range(70, 161))], width=4)
    return folder


def _windows(batch: dict[str, np.ndarray]) -> list[int]:
    """The window numbers of a batch of counting windows."""
    assert np.all(batch["targets"] == batch["inputs"] + 1)
    return [int(row[0]) // SEQ for row in batch["inputs"]]


def _take(it, n: int) -> list[dict[str, np.ndarray]]:
    return [next(it) for _ in range(n)]


def test_batch_format(base_cfg: ConfigDict, datatrove_corpus: DatatroveCorpus) -> None:
    cfg = _cfg(
        base_cfg,
        data__paths=str(datatrove_corpus.folder),
        train__seq_len=16,
        data__tokenizer=str(datatrove_corpus.tokenizer),
    )
    batch = next(make_train_iterator(cfg, vocab_size=400))
    assert sorted(batch) == ["inputs", "loss_mask", "targets"]
    assert {k: (v.shape, v.dtype.name) for k, v in batch.items()} == {
        "inputs": ((4, 16), "int32"),
        "targets": ((4, 16), "int32"),
        "loss_mask": ((4, 16), "float32"),
    }
    np.testing.assert_array_equal(batch["inputs"][:, 1:], batch["targets"][:, :-1])
    assert "2 shards" in data_summary(cfg)


def test_each_epoch_is_a_new_deterministic_permutation(
    base_cfg: ConfigDict, counting_shards: Path
) -> None:
    cfg = _cfg(base_cfg, data__paths=str(counting_shards))
    it = make_train_iterator(cfg, 161)
    stream = [w for b in _take(it, 30) for w in _windows(b)]
    epochs = [stream[0:40], stream[40:80], stream[80:120]]
    for epoch in epochs:
        assert sorted(epoch) == list(range(40))
    assert epochs[0] != list(range(40))
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0]
    again = [w for b in _take(make_train_iterator(cfg, 161), 30) for w in _windows(b)]
    assert again == stream
    other_seed = _cfg(base_cfg, data__paths=str(counting_shards), run__seed=7)
    assert [
        w for b in _take(make_train_iterator(other_seed, 161), 10) for w in _windows(b)
    ] != epochs[0]
    unshuffled = _cfg(base_cfg, data__paths=str(counting_shards), data__shuffle=False)
    assert [
        w for b in _take(make_train_iterator(unshuffled, 161), 12) for w in _windows(b)
    ] == list(range(40)) + list(range(8))


def test_order_is_grains_shuffle_repeat_cut_to_whole_batches(
    base_cfg: ConfigDict, counting_shards: Path
) -> None:
    """Epoch e is grain's index shuffle of all windows with seed run.seed + e (the order of
    `range(n).shuffle(seed).repeat()`), cut to whole global batches: the order checkpoints
    written by earlier versions point into."""
    import grain

    # 40 windows, batches of 12: 3 batches per epoch, 4 windows skipped in each epoch.
    cfg = _cfg(base_cfg, data__paths=str(counting_shards), train__global_batch_size=12, run__seed=5)
    ours = [w for b in _take(make_train_iterator(cfg, 161), 9) for w in _windows(b)]
    reference = grain.MapDataset.range(40).shuffle(seed=5).repeat(None)
    assert ours == [reference[40 * e + i] for e in range(3) for i in range(36)]


@pytest.mark.parametrize("process_count", [2, 4])
def test_processes_read_disjoint_rows_of_the_same_batches(
    base_cfg: ConfigDict, counting_shards: Path, process_count: int
) -> None:
    cfg = _cfg(base_cfg, data__paths=str(counting_shards), train__global_batch_size=8)
    whole = _take(make_train_iterator(cfg, 161), 12)  # 5 batches per epoch: crosses two epochs
    parts = [
        _take(make_train_iterator(cfg, 161, process_index=p, process_count=process_count), 12)
        for p in range(process_count)
    ]
    for step, batch in enumerate(whole):
        for key in batch:
            local = [part[step][key] for part in parts]
            assert all(x.shape == (8 // process_count, SEQ) for x in local)
            np.testing.assert_array_equal(np.concatenate(local), batch[key])


def test_process_only_reads_its_rows(counting_shards: Path) -> None:
    from jaxtrain.data import batches as batches_lib
    from jaxtrain.data import pipeline

    source = pipeline.window_source(str(counting_shards), SEQ)
    read: list[int] = []

    class Counting:
        def __len__(self) -> int:
            return len(source)

        def __getitem__(self, index: int) -> dict[str, np.ndarray]:
            read.append(index)
            return source[index]

    plan = batches_lib.BatchPlan(len(source), 8, process_index=1, process_count=2)
    stream = batches_lib.epoch_stream(Counting(), plan, shuffle=True, seed=0)
    batch = batches_lib.process_batches(stream, plan)[3]
    assert len(read) == 4 and _windows(batch) == read


def test_exact_resume_from_state(base_cfg: ConfigDict, counting_shards: Path) -> None:
    cfg = _cfg(base_cfg, data__paths=str(counting_shards))
    it = make_train_iterator(cfg, 161)
    _take(it, 13)
    state = it.get_state()
    expected = _take(it, 9)
    fresh = make_train_iterator(cfg, 161)
    fresh.set_state(state)
    for a, b in zip(expected, _take(fresh, 9), strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_a_state_resumes_on_another_process_count(
    base_cfg: ConfigDict, counting_shards: Path
) -> None:
    """The state is a global batch number: a checkpoint written by two processes resumes on one
    (or four) with the same global batches, which is why it is saved once for all processes."""
    cfg = _cfg(base_cfg, data__paths=str(counting_shards), train__global_batch_size=8)
    whole = _take(make_train_iterator(cfg, 161), 9)
    two = make_train_iterator(cfg, 161, process_index=1, process_count=2)
    _take(two, 6)
    state = two.get_state()
    one = make_train_iterator(cfg, 161)
    one.set_state(state)
    assert [_windows(b) for b in _take(one, 3)] == [_windows(b) for b in whole[6:]]
    quarters = [make_train_iterator(cfg, 161, process_index=p, process_count=4) for p in range(4)]
    for it in quarters:
        it.set_state(state)
    assert sum((_windows(next(it)) for it in quarters), []) == _windows(whole[6])


def test_iterator_without_prefetch(base_cfg: ConfigDict, counting_shards: Path) -> None:
    threaded = _take(make_train_iterator(_cfg(base_cfg, data__paths=str(counting_shards)), 161), 5)
    plain = _take(
        make_train_iterator(
            _cfg(base_cfg, data__paths=str(counting_shards), data__prefetch=0), 161
        ),
        5,
    )
    assert [_windows(b) for b in threaded] == [_windows(b) for b in plain]


def test_eval_batches_are_fixed_and_in_file_order(
    base_cfg: ConfigDict, counting_shards: Path
) -> None:
    cfg = _cfg(
        base_cfg,
        data__paths=str(counting_shards),
        data__val_paths=str(counting_shards),
        train__eval_batches=3,
    )
    make = make_eval_batches(cfg, 161)
    first, second = list(make()), list(make())
    assert [_windows(b) for b in first] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert [_windows(b) for b in second] == [_windows(b) for b in first]
    halves = [
        list(make_eval_batches(cfg, 161, process_index=p, process_count=2)()) for p in range(2)
    ]
    assert [_windows(a) + _windows(b) for a, b in zip(*halves)] == [_windows(b) for b in first]
    many = _cfg(
        base_cfg,
        data__paths=str(counting_shards),
        data__val_paths=str(counting_shards),
        train__eval_batches=100,
    )
    assert len(list(make_eval_batches(many, 161)())) == 10  # all the validation data holds
    assert make_eval_batches(_cfg(base_cfg, data__paths=str(counting_shards)), 161) is None


def test_synthetic_data_is_deterministic(base_cfg: ConfigDict) -> None:
    a, b = SyntheticSource(50, 8, seed=1), SyntheticSource(50, 8, seed=1)
    for i in (0, 5, 2**31 - 2):
        np.testing.assert_array_equal(a[i]["inputs"], b[i]["inputs"])
        assert a[i]["inputs"].dtype == np.int32 and a[i]["inputs"].max() < 50
    assert not np.array_equal(a[0]["inputs"], a[1]["inputs"])
    assert not np.array_equal(a[0]["inputs"], SyntheticSource(50, 8, seed=2)[0]["inputs"])
    np.testing.assert_array_equal(a[3]["inputs"][1:], a[3]["targets"][:-1])

    cfg = _cfg(base_cfg, data__kind="synthetic", train__seq_len=8)
    run1, run2 = _take(make_train_iterator(cfg, 50), 3), _take(make_train_iterator(cfg, 50), 3)
    for x, y in zip(run1, run2):
        np.testing.assert_array_equal(x["inputs"], y["inputs"])
    half = next(make_train_iterator(cfg, 50, process_index=1, process_count=2))
    np.testing.assert_array_equal(half["inputs"], run1[0]["inputs"][2:])
    evals = list(make_eval_batches(cfg, 50)())
    assert len(evals) == cfg.train.eval_batches
    assert not np.array_equal(evals[0]["inputs"], run1[0]["inputs"])
    assert "synthetic" in data_summary(cfg)


def test_config_and_data_errors(
    base_cfg: ConfigDict, counting_shards: Path, tmp_path: Path
) -> None:
    cfg = _cfg(base_cfg, data__paths=str(counting_shards), train__global_batch_size=6)
    with pytest.raises(ConfigError, match="process_index=4 must lie in 0..process_count-1"):
        make_train_iterator(cfg, 161, process_index=4, process_count=4)
    with pytest.raises(DataError, match=r"00001_unshuffled\.ds: token id 100 at token 30 "):
        make_train_iterator(cfg, 100)
    big = _cfg(base_cfg, data__paths=str(counting_shards), train__global_batch_size=64)
    with pytest.raises(DataError, match="hold 40 windows .* fewer than one global batch"):
        make_train_iterator(big, 161)
    write_raw_shard(tmp_path, "a.ds", [[1, 2, 3]])
    with pytest.raises(DataError, match=r"a\.ds hold 3 tokens in all"):
        make_train_iterator(_cfg(base_cfg, data__paths=str(tmp_path)), 161)


@pytest.mark.slow  # worker processes start by importing jax: ~10 s on two cores
def test_worker_processes_give_the_same_batches(
    base_cfg: ConfigDict, counting_shards: Path
) -> None:
    cfg = _cfg(base_cfg, data__paths=str(counting_shards))
    expected = [_windows(b) for b in _take(make_train_iterator(cfg, 161), 8)]
    workers = _cfg(base_cfg, data__paths=str(counting_shards), data__worker_count=1)
    it = make_train_iterator(workers, 161)
    try:
        got = [_windows(b) for b in _take(it, 3)]
        state = it.get_state()
        got += [_windows(b) for b in _take(it, 5)]
    finally:
        it.close()
    assert got == expected
    resumed = make_train_iterator(workers, 161)
    try:
        resumed.set_state(state)
        assert [_windows(b) for b in _take(resumed, 5)] == expected[3:]
    finally:
        resumed.close()


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"data__reset_attention_mask": True},
        {"data__reset_position_ids": True, "data__eod_mask_loss": True},
    ],
)
def test_batch_fields_declare_what_the_iterators_yield(base_cfg, counting_shards, options):
    """The train step is compiled for `batch_fields` before any batch is read."""
    from jaxtrain.data.pipeline import batch_fields

    for kind in ("datatrove", "synthetic"):
        cfg = _cfg(base_cfg, data__kind=kind, data__paths=str(counting_shards), **options)
        batch = next(make_train_iterator(cfg, 1000))
        assert {k: v.dtype for k, v in batch.items()} == batch_fields(cfg)
