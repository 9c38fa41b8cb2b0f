"""Mixtures of raw-text streams and tokenized shard sources (`data.kind="text"` with weights).

Which source each row of the global stream comes from is the shard mixture's rule
(`mixture.Interleave`: position n = s * G + r of global batch s, row r). A shard source reads its
windows by index, each epoch in its own shuffled order (`batches.windows`, as `mixture_stream`
does). A raw-text source is a stream (`text_stream.TextWindows` taking one window at a time):
its rows are the next windows of that stream, in order, and every process advances every text
stream through all rows of a global batch, keeping its own. The state is the global batch
number and each text stream's position, the same in every process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxtrain.data.batches import windows
from jaxtrain.data.documents import DocumentOptions
from jaxtrain.data.mixture import SOURCE_SEED_SALT, Interleave
from jaxtrain.data.text_stream import TextWindows, stack, window_fields


class MixedBatches:
    """A process's batches of a weighted mixture of text streams and shard window sources."""

    def __init__(
        self,
        sources: Sequence[Any],
        weights: Sequence[float],
        global_batch: int,
        documents: DocumentOptions,
        process_index: int,
        process_count: int,
        *,
        shuffle: bool,
        seed: int,
    ) -> None:
        self.sources, self.documents = list(sources), documents
        self.interleave = Interleave(weights)
        self.global_batch = global_batch
        local = global_batch // process_count
        self.own = range(process_index * local, (process_index + 1) * local)
        self.shard_streams = {
            k: windows(s, shuffle=shuffle, seed=seed + k * SOURCE_SEED_SALT).repeat()
            for k, s in enumerate(self.sources)
            if not isinstance(s, TextWindows)
        }
        self.batch = 0

    def __iter__(self) -> MixedBatches:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        g = self.global_batch
        positions = np.arange(self.batch * g, (self.batch + 1) * g, dtype=np.int64)
        which, index = self.interleave.locate(positions)
        rows = []
        for r, (k, i) in enumerate(zip(which.tolist(), index.tolist())):
            source = self.sources[k]
            if isinstance(source, TextWindows):
                ((window, ends),) = source.next_group()  # every process advances every stream
                if r in self.own:
                    rows.append(window_fields(window, ends, self.documents))
            elif r in self.own:
                rows.append(self.shard_streams[k][i])
        self.batch += 1
        return stack(rows)

    def get_state(self) -> dict[str, Any]:
        """The global batch number and each text stream's state (JSON)."""
        texts = {
            str(k): s.get_state() for k, s in enumerate(self.sources) if isinstance(s, TextWindows)
        }
        return {"next_index": self.batch, "text": texts}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continues from `get_state`'s result."""
        self.batch = int(state["next_index"])
        for k, text_state in state.get("text", {}).items():
            self.sources[int(k)].set_state(text_state)
