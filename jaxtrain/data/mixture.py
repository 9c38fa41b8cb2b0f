"""Weighted mixtures of window sources, deterministic and random-access by stream position.

Which source a row comes from. The global stream of rows (row r of global batch s is position
n = s * G + r) is cut into periods of PERIOD positions. In every period source k owns exactly
q_k positions, q_k the largest-remainder rounding of w_k * PERIOD (so the realised proportion is
within 1 / PERIOD of the weight), spread evenly: its i-th position sits at rank (i + 1/2) / q_k of
the period, as in stride scheduling. Over any stretch of the stream, each source's count is
within a couple of rows of weight x rows, and position n's source and its index in that source's
own stream need no history: n // PERIOD whole periods plus a table lookup.

Which window. Source k's own stream visits its windows epoch by epoch, each source with its own
epoch counter: its j-th row is window `index_shuffle(j % len_k, seed=run.seed + e + k * SALT)` of
epoch e = j // len_k (file order without shuffle). A small source simply starts new epochs more
often than a large one.

Because everything is a function of the position, resuming needs only the batch number (grain's
iterator state) and every process can compute just its own rows.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import grain
import numpy as np

from jaxtrain.data.batches import RowSource, windows
from jaxtrain.data.errors import DataError

PERIOD = 1 << 16
# Offsets each source's shuffle seeds, so two sources of equal size get different orders.
SOURCE_SEED_SALT = 1 << 20


def quotas(weights: Sequence[float], period: int = PERIOD) -> np.ndarray:
    """Positions per period for each weight: largest-remainder rounding of w / sum(w) * period."""
    w = np.asarray(weights, np.float64)
    exact = w / w.sum() * period
    q = np.floor(exact).astype(np.int64)
    q[np.argsort(-(exact - q), kind="stable")[: period - int(q.sum())]] += 1
    if np.any(q == 0):
        k = int(np.argmin(q))
        raise DataError(
            f"mixture weight {weights[k]} is below 1/{period} of the total "
            f"{w.sum():g}; raise it or drop that source."
        )
    return q


class Interleave(grain.transforms.DatasetSelectionMap):
    """Maps stream positions to (source, index in that source's stream); see the module doc.

    grain's own `MapDataset.mix(datasets, weights)` cannot take its place: it truncates the
    weights to integers after scaling the smallest to 100 (grain 0.2.18 `mix.py`:
    `_float_to_int_proportions`), so 1 : 1.009 mixes as 1 : 1 and 0.3 : 0.7 as 100 : 233 for good,
    and it orders rows by another rule, so every mixture checkpoint written before would resume
    on other batches. This map is handed to grain's `select_from_datasets`, which does the
    reading.
    """

    def __init__(self, weights: Sequence[float], period: int = PERIOD) -> None:
        self.period = int(period)
        self.quotas = quotas(weights, self.period)
        sources = np.repeat(np.arange(len(self.quotas)), self.quotas)
        ranks = np.concatenate([np.arange(q) for q in self.quotas])
        keys = (ranks + 0.5) / self.quotas[sources]
        order = np.lexsort((sources, keys))
        self.source_of = sources[order].astype(np.int32)
        self.rank_of = ranks[order].astype(np.int64)

    def __len__(self) -> int:
        return sys.maxsize

    def __getitem__(self, position: int) -> tuple[int, int]:
        source, index = self.locate([position])
        return int(source[0]), int(index[0])

    def locate(self, positions: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(source, index in the source's own stream) of each stream position."""
        periods, rest = np.divmod(np.asarray(positions, np.int64), self.period)
        source = self.source_of[rest]
        return source, periods * self.quotas[source] + self.rank_of[rest]

    def rows_before_wrap(self, lengths: Sequence[int]) -> int:
        """Stream positions before the first source starts its second pass (at least 1)."""
        lengths = np.asarray(lengths, np.int64)
        # Source k's count after n positions is at most n * q_k / period + 1.
        return max(1, int(np.min((lengths - 1) * self.period // self.quotas)))


def mixture_stream(
    sources: Sequence[RowSource], weights: Sequence[float], *, shuffle: bool, seed: int
) -> grain.MapDataset:
    """The endless stream of rows drawn from `sources` in proportion to `weights` (see the
    module doc): grain's `select_from_datasets` over each source's own repeated epochs."""
    streams = [
        windows(s, shuffle=shuffle, seed=int(seed) + k * SOURCE_SEED_SALT).repeat()
        for k, s in enumerate(sources)
    ]
    return grain.MapDataset.select_from_datasets(streams, Interleave(weights))
