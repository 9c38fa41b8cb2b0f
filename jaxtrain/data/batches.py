"""Global batches cut from one window source, and the rows of them each process reads.

Order. Windows are visited epoch by epoch; epoch e is a permutation of all windows drawn by grain's
index shuffle with seed `run.seed + e` (so every epoch has a new order, reproducible from the seed
alone and computed per index, never materialised). Each epoch is cut into
`num_windows // global_batch_size` global batches; the windows left over at the end of an epoch
are skipped in that epoch only (the next permutation places them elsewhere).

Processes. Global batch s is the windows at stream positions [s*G, (s+1)*G) of that order. Process
p of P reads rows [p*G/P, (p+1)*G/P) of it and nothing else, so concatenating the processes' batches
in process order gives exactly the batch one process would read alone.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Protocol

import numpy as np
from grain.experimental import index_shuffle

# grain's index shuffle takes seeds below 2**32.
SEED_RANGE = 2**32


class RowSource(Protocol):
    """A random-access source of windows that can stack a list of them into a batch."""

    def __len__(self) -> int: ...

    def read_rows(self, indices: Any) -> dict[str, np.ndarray]:
        """The windows `indices` stacked into a batch dict of [len(indices), seq_len] arrays."""


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

    def local_positions(self, step: int) -> range:
        """Stream positions of this process's rows of global batch `step`."""
        first = int(step) * self.global_batch + self.process_index * self.local_batch
        return range(first, first + self.local_batch)


def shuffled(i: int, num_windows: int, seed: int) -> int:
    """Position i of grain's index-shuffle permutation of range(num_windows) under `seed`."""
    return index_shuffle(i, max_index=num_windows - 1, seed=seed % SEED_RANGE, rounds=4)


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
        positions = p.local_positions(batch_in_epoch)
        if not self.shuffle:
            return list(positions)
        return [shuffled(i, p.num_windows, self.seed + epoch) for i in positions]

    def __getitem__(self, step: int) -> dict[str, np.ndarray]:
        return self.source.read_rows(self.window_indices(step))
