"""The grain input pipeline: shuffled global batches, each process reading only its own rows.

Order. Windows are visited epoch by epoch; epoch e is a permutation of all windows drawn by grain's
index shuffle with seed `run.seed + e` (so every epoch has a new order, reproducible from the seed
alone and computed per index, never materialised). Each epoch is cut into
`num_windows // global_batch_size` global batches; the windows left over at the end of an epoch
are skipped in that epoch only (the next permutation places them elsewhere).

Processes. Global batch s is the windows at stream positions [s*G, (s+1)*G) of that order. Process
p of P reads rows [p*G/P, (p+1)*G/P) of it and nothing else, so concatenating the processes' batches
in process order gives exactly the batch one process would read alone.

State. The iterator is a grain `DatasetIterator` over global batch numbers; `get_state()` is a small
dict and `set_state()` on a freshly built iterator continues with exactly the same batches.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any, Protocol

import grain
import numpy as np
from grain.experimental import index_shuffle
from ml_collections import ConfigDict

from jaxtrain.config import split_paths
from jaxtrain.data.datatrove import find_shards
from jaxtrain.data.errors import DataError
from jaxtrain.data.synthetic import SyntheticSource
from jaxtrain.data.tokenize import eos_id_from_tokenizer
from jaxtrain.data.windows import TokenPool, WindowSource
from jaxtrain.models.spec import ConfigError

# Pools up to this many tokens are scanned whole for out-of-vocabulary ids at start-up (about a
# second from page cache); larger ones have each shard's head scanned.
FULL_VOCAB_SCAN_TOKENS = 1 << 28
HEAD_VOCAB_SCAN_TOKENS = 1 << 22
# Synthetic validation windows come from a different stream than the training ones.
SYNTHETIC_EVAL_SEED_OFFSET = 1_000_003


class RowSource(Protocol):
    """A random-access source of windows that can stack a list of them into a batch."""

    def __len__(self) -> int: ...

    def read_rows(self, indices: Any) -> dict[str, np.ndarray]: ...


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """How global batches are cut from a source and sliced among processes."""

    num_windows: int
    global_batch: int
    process_index: int
    process_count: int

    @property
    def local_batch(self) -> int:
        """Rows of each global batch that one process reads."""
        return self.global_batch // self.process_count

    @property
    def steps_per_epoch(self) -> int:
        """Whole global batches in one pass over the windows."""
        return self.num_windows // self.global_batch


class LocalBatchSource:
    """Random-access source: global batch number -> this process's rows of that batch.

    Infinite (length sys.maxsize): batch s lies in epoch s // steps_per_epoch. With `shuffle`, the
    window at position i of epoch e is grain's `index_shuffle(i, seed=seed + e, rounds=4)`: the
    same order `grain.MapDataset.range(n).shuffle(seed).repeat()` gives, computed per index.
    """

    def __init__(self, source: RowSource, plan: BatchPlan, *, shuffle: bool, seed: int,
                 length: int = sys.maxsize) -> None:
        self.source = source
        self.plan = plan
        self.shuffle = shuffle
        self.seed = int(seed)
        self._len = length

    def __len__(self) -> int:
        return self._len

    def window_indices(self, step: int) -> list[int]:
        """The windows of this process's rows of global batch `step`."""
        p = self.plan
        epoch, batch_in_epoch = divmod(int(step), p.steps_per_epoch)
        first = batch_in_epoch * p.global_batch + p.process_index * p.local_batch
        positions = range(first, first + p.local_batch)
        if not self.shuffle:
            return list(positions)
        seed = (self.seed + epoch) % 2**32
        return [index_shuffle(i, max_index=p.num_windows - 1, seed=seed, rounds=4)
                for i in positions]

    def __getitem__(self, step: int) -> dict[str, np.ndarray]:
        return self.source.read_rows(self.window_indices(step))


def _plan(cfg: ConfigDict, num_windows: int, process_index: int, process_count: int,
          what: str) -> BatchPlan:
    """Checks the batch against the process count and the data, and returns the plan."""
    g = cfg.train.global_batch_size
    if process_count <= 0 or not 0 <= process_index < process_count:
        raise ConfigError(f"process_index={process_index} must lie in 0..process_count-1 "
                          f"(process_count={process_count}).")
    if g % process_count:
        raise ConfigError(f"train.global_batch_size={g} is not divisible by the {process_count} "
                          "processes; each process reads an equal share of every batch. Pick a "
                          "multiple of the process count.")
    if num_windows < g:
        raise DataError(f"{what} hold {num_windows} windows of train.seq_len + 1 = "
                        f"{cfg.train.seq_len + 1} tokens, fewer than one global batch of "
                        f"train.global_batch_size={g}. Add data, or lower the batch or seq_len.")
    return BatchPlan(num_windows, g, process_index, process_count)


def window_source(paths: str | list[str], seq_len: int, vocab_size: int | None = None,
                  eos_id: int | None = None) -> WindowSource:
    """Windows over every datatrove shard under `paths`, checked against the vocabulary."""
    source = WindowSource(TokenPool(find_shards(split_paths(paths), eos_id)), seq_len)
    if vocab_size is not None:
        head = None if len(source.pool) <= FULL_VOCAB_SCAN_TOKENS else HEAD_VOCAB_SCAN_TOKENS
        source.validate_vocab(vocab_size, head)
    return source


def _eos_id(cfg: ConfigDict) -> int | None:
    return eos_id_from_tokenizer(cfg.data.tokenizer) if cfg.data.tokenizer else None


def _read_options(cfg: ConfigDict) -> grain.ReadOptions:
    prefetch = max(0, int(cfg.data.prefetch))
    # Each element is a whole local batch, so a few threads keep `prefetch` batches in flight.
    return grain.ReadOptions(num_threads=min(prefetch, 8), prefetch_buffer_size=prefetch)


def _allow_worker_processes() -> None:
    """grain <= 0.2.18 worker processes read absl flags; mark them parsed outside absl.app."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def make_train_iterator(cfg: ConfigDict, vocab_size: int, *, process_index: int = 0,
                        process_count: int = 1) -> grain.DatasetIterator:
    """The training batch iterator of one process: an endless, checkpointable grain iterator.

    Each element is {"inputs", "targets": int32, "loss_mask": float32}, all of shape
    [train.global_batch_size // process_count, train.seq_len].
    """
    seq_len = cfg.train.seq_len
    if cfg.data.kind == "synthetic":
        source: RowSource = SyntheticSource(vocab_size, seq_len, seed=cfg.run.seed)
        shuffle, what = False, "synthetic data"
    elif cfg.data.kind == "datatrove":
        source = window_source(cfg.data.paths, seq_len, vocab_size, _eos_id(cfg))
        shuffle, what = cfg.data.shuffle, f"the training shards ({cfg.data.paths})"
    else:
        raise ConfigError(f"data.kind={cfg.data.kind!r} is not one of ('datatrove', 'synthetic').")
    plan = _plan(cfg, len(source), process_index, process_count, what)
    batches = LocalBatchSource(source, plan, shuffle=shuffle, seed=cfg.run.seed)
    ds = grain.MapDataset.source(batches).to_iter_dataset(_read_options(cfg))
    if cfg.data.worker_count > 0:
        _allow_worker_processes()
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(
            num_workers=cfg.data.worker_count,
            per_worker_buffer_size=max(1, cfg.data.prefetch)))
    return iter(ds)


def make_eval_batches(cfg: ConfigDict, vocab_size: int, *, process_index: int = 0,
                      process_count: int = 1) -> Callable[[], grain.DatasetIterator] | None:
    """A function returning a fresh iterator over the same validation batches every call.

    The batches are the first `train.eval_batches` global batches of the validation windows in
    file order (fewer when the validation data holds fewer), sliced among processes like training
    batches. Synthetic data gets a synthetic stream with another seed. None when there is no
    validation data or `train.eval_batches` is 0.
    """
    seq_len = cfg.train.seq_len
    if cfg.train.eval_batches <= 0:
        return None
    if cfg.data.kind == "synthetic":
        source: RowSource = SyntheticSource(
            vocab_size, seq_len, seed=cfg.run.seed + SYNTHETIC_EVAL_SEED_OFFSET)
        what = "synthetic data"
    elif not split_paths(cfg.data.val_paths):
        return None
    else:
        source = window_source(cfg.data.val_paths, seq_len, vocab_size, _eos_id(cfg))
        what = f"the validation shards ({cfg.data.val_paths})"
    plan = _plan(cfg, len(source), process_index, process_count, what)
    num_batches = min(cfg.train.eval_batches, plan.steps_per_epoch)
    batches = LocalBatchSource(source, plan, shuffle=False, seed=0, length=num_batches)
    ds = grain.MapDataset.source(batches).to_iter_dataset(_read_options(cfg))
    return lambda: iter(ds)


def _count(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def data_summary(cfg: ConfigDict) -> str:
    """One line for the run log: shards, tokens, windows and how many epochs the run covers."""
    t = cfg.train
    if cfg.data.kind == "synthetic":
        return (f"data: synthetic tokens, {t.global_batch_size} x {t.seq_len} per step, "
                f"{_count(t.steps * t.global_batch_size * t.seq_len)} tokens in {t.steps} steps")
    shards = find_shards(split_paths(cfg.data.paths))
    pool = TokenPool(shards)
    windows = (len(pool) - 1) // t.seq_len
    steps_per_epoch = windows // t.global_batch_size
    epochs = t.steps / steps_per_epoch if steps_per_epoch else float("inf")
    text = (f"data: {len(shards)} shards, {_count(len(pool))} tokens, {_count(windows)} windows "
            f"of {t.seq_len + 1}, {steps_per_epoch} steps/epoch, {epochs:.3g} epochs in "
            f"{t.steps} steps")
    if split_paths(cfg.data.val_paths):
        val = find_shards(split_paths(cfg.data.val_paths))
        text += f"; val: {len(val)} shards, {_count(sum(s.num_tokens for s in val))} tokens"
    return text
