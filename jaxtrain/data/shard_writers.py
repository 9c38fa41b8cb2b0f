"""Streaming writers of tokenized documents into Megatron datasets, with an in-file shuffle.

datatrove shards are written by datatrove's own `DocumentTokenizer` (`tokenize_tasks`). Megatron
datasets are written here: datatrove 0.10.1 has a `MegatronDocumentTokenizer`, but it names its
files `<rank>_tokens.bin/.idx` rather than Megatron's `<key>_document`, picks uint16 up to 65536 ids
where Megatron's own preprocessing switches to int32 at 65500 (FORMATS.md), and cannot shuffle
documents inside a file, which `--format megatron` does by default.

A writer appends documents to its files as they come, keeping only one length per document in
memory, so a task's output may be far larger than memory. Shuffling documents inside a file (what
datatrove's `shuffle_documents` does) goes through a spool: documents are first streamed to a
temporary file, then copied into the final one in a seeded random order, read back through a
memory map.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from jaxtrain.data.megatron import MegatronWriter

# Documents copied per group when replaying a spool in shuffled order.
REPLAY_GROUP = 4096


class DocumentWriter(Protocol):
    """Anything documents can be appended to and that is finished by `close()`."""

    def add_many(self, docs: Sequence[Sequence[int] | np.ndarray]) -> None:
        """Appends documents in order."""

    def close(self) -> Path | None:
        """Finishes the files; returns the main one, or None when nothing was written."""


class MegatronDocumentWriter:
    """A MegatronWriter that leaves no files when it got no document."""

    def __init__(self, prefix: str | os.PathLike, dtype: np.dtype) -> None:
        self._writer = MegatronWriter(prefix, dtype)
        self.num_docs = 0

    def add_many(self, docs: Sequence[Sequence[int] | np.ndarray]) -> None:
        """Appends documents, one sequence each."""
        self._writer.add_many(docs)
        self.num_docs += len(docs)

    def close(self) -> Path | None:
        """Writes the .idx; returns the .bin path, or None (files removed) when empty."""
        prefix = self._writer.close()
        files = [prefix.with_name(prefix.name + s) for s in (".bin", ".idx")]
        if self.num_docs == 0:
            for f in files:
                f.unlink()
            return None
        return files[0]


class ShuffledWriter:
    """Collects documents in a spool file, then writes them to `final` in a seeded random order.

    The order is `np.random.default_rng(seed).permutation(num_docs)`, whatever the corpus size.
    """

    def __init__(
        self, final: DocumentWriter, spool: str | os.PathLike, dtype: np.dtype, seed: int
    ) -> None:
        self.final = final
        self.seed = seed
        self.dtype = np.dtype(dtype)
        self.spool = Path(spool)
        self._file = open(self.spool, "wb")
        self._lengths: list[int] = []

    def add_many(self, docs: Sequence[Sequence[int] | np.ndarray]) -> None:
        """Appends documents to the spool."""
        arrays = [np.asarray(d, self.dtype) for d in docs]
        if arrays:
            np.concatenate(arrays).tofile(self._file)
            self._lengths.extend(a.size for a in arrays)

    def close(self) -> Path | None:
        """Replays the spool in shuffled order into the final writer, removes it, closes that."""
        self._file.close()
        try:
            lengths = np.asarray(self._lengths, np.int64)
            if lengths.size:
                tokens = (
                    np.memmap(self.spool, self.dtype, "r")
                    if lengths.sum()
                    else np.zeros(0, self.dtype)
                )
                starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
                order = np.random.default_rng(self.seed).permutation(lengths.size)
                for lo in range(0, order.size, REPLAY_GROUP):
                    group = order[lo : lo + REPLAY_GROUP]
                    self.final.add_many([tokens[starts[i] : starts[i] + lengths[i]] for i in group])
                del tokens
        finally:
            self.spool.unlink(missing_ok=True)
        return self.final.close()
