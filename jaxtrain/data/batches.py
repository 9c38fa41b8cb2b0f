"""Global batches as grain datasets, and the rows of them each process reads.

Order. Windows are visited epoch by epoch; epoch e is a permutation of all windows drawn by grain's
index shuffle with seed `run.seed + e` (so every epoch has a new order, reproducible from the seed
alone and computed per index, never materialised). Each epoch is cut into
`num_windows // global_batch_size` global batches; the windows left over at the end of an epoch
are skipped in that epoch only (the next permutation places them elsewhere). In grain's terms the
stream is `MapDataset.source(windows).shuffle(seed)[:steps_per_epoch * G].repeat()`: the slice
keeps the epoch number, so shuffle still reseeds each epoch.

Processes. Global batch s is the windows at stream positions [s*G, (s+1)*G) of that order. Process
p of P reads rows [p*G/P, (p+1)*G/P) of it and nothing else (`stream.batch(G/P)[p::P]`), so
concatenating the processes' batches in process order gives exactly the batch one process would
read alone.

Every batch is a pure function of (settings, batch number, process), so the iterator's state is a
batch counter and a resumed run reads exactly the batches it would have read.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import grain
import numpy as np

# grain's index shuffle takes seeds below 2**32.
SEED_RANGE = 2**32


class RowSource(Protocol):
    """A random-access source of windows (dicts of [seq_len] arrays)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> dict[str, np.ndarray]: ...


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


class SourceDataset(grain.MapDataset):
    """A window source as a grain MapDataset, read directly (index modulo length, like grain's
    `MapDataset.source`, so indices past the end are the next epochs').

    `MapDataset.source` would serve, but per read it records Prometheus metrics and estimates the
    window's byte size through a tree map, which costs half again a batch's own CPU time
    (docs/performance.md#hardware-choices).
    """

    def __init__(self, source: RowSource | Any) -> None:
        super().__init__()
        self._source = source

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.slice(index)
        return self._source[index % len(self._source)]

    def __str__(self) -> str:
        return f"SourceDataset({self._source!r})"


def windows(source: RowSource | Any, *, shuffle: bool, seed: int) -> grain.MapDataset:
    """The windows of `source`, in grain's index-shuffle order under `seed` (file order without
    `shuffle`); indices past the end start new epochs, each shuffled with the next seed."""
    ds = SourceDataset(source)
    return ds.shuffle(seed=int(seed) % SEED_RANGE) if shuffle else ds


def epoch_stream(
    source: RowSource | Any, plan: BatchPlan, *, shuffle: bool, seed: int
) -> grain.MapDataset:
    """The endless stream of windows: epoch after epoch, each cut to whole global batches."""
    return windows(source, shuffle=shuffle, seed=seed)[
        : plan.steps_per_epoch * plan.global_batch
    ].repeat()


def process_batches(
    stream: grain.MapDataset, plan: BatchPlan, length: int | None = None
) -> grain.MapDataset:
    """Element s is this process's rows of global batch s of `stream`, stacked into a dict of
    [local_batch, seq_len] arrays; only those rows are read. `length` keeps the first batches."""
    batches = stream.batch(plan.local_batch)[plan.process_index :: plan.process_count]
    return batches if length is None else batches[:length]
