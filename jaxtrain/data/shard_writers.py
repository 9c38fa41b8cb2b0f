"""Streaming writers of tokenized documents: datatrove shards, Megatron datasets, in-file shuffle.

Every writer appends documents to its files as they come, keeping only one length per document in
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
DATATROVE_DTYPES = {2: np.dtype("<u2"), 4: np.dtype("<u4")}


class DocumentWriter(Protocol):
    """Anything documents can be appended to and that is finished by `close()`."""

    def add_many(self, docs: Sequence[Sequence[int] | np.ndarray]) -> None:
        """Appends documents in order."""

    def close(self) -> Path | None:
        """Finishes the files; returns the main one, or None when nothing was written."""


def human_count(n: int) -> str:
    """The third metadata line, as datatrove writes it (humanize.metric, 3 digits): '1.40 kT'."""
    exponent = len(str(n)) - 1 if n > 0 else 0
    value = n / 10 ** (exponent // 3 * 3)
    digits = 2 - exponent % 3
    if round(value, digits) >= 10 ** (exponent % 3 + 1):  # 999.6 -> 1.00 k
        exponent += 1
        value, digits = n / 10 ** (exponent // 3 * 3), 2 - exponent % 3
    prefix = "kMGTPEZY"[exponent // 3 - 1] if exponent >= 3 else ""
    return f"{value:.{digits}f} {prefix}T"


class DatatroveWriter:
    """Streams documents into X.ds and X.ds.index; writes X.ds.metadata on close.

    The layout is datatrove's `DocumentTokenizer` output (FORMATS.md). A writer that received no
    document removes its files and `close()` returns None.
    """

    def __init__(self, path: str | os.PathLike, token_size: int, tokenizer_name: str) -> None:
        self.path = Path(path)
        self.token_size = token_size
        self.dtype = DATATROVE_DTYPES[token_size]
        self.tokenizer_name = tokenizer_name
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tokens = open(self.path, "wb")
        self._index = open(self.path.with_name(self.path.name + ".index"), "wb")
        self.num_tokens = 0
        self.num_docs = 0

    def add_many(self, docs: Sequence[Sequence[int] | np.ndarray]) -> None:
        """Appends documents in order with one write per file for the whole group."""
        arrays = [np.asarray(d, self.dtype) for d in docs]
        if not arrays:
            return
        np.concatenate(arrays).tofile(self._tokens)
        ends = self.num_tokens + np.cumsum([a.size for a in arrays], dtype=np.uint64)
        ends.astype("<u8").tofile(self._index)
        self.num_tokens = int(ends[-1])
        self.num_docs += len(arrays)

    def close(self) -> Path | None:
        """Finishes the files; returns X.ds, or None (files removed) when no document came."""
        self._tokens.close()
        self._index.close()
        if self.num_docs == 0:
            self.path.unlink()
            self.path.with_name(self.path.name + ".index").unlink()
            return None
        self.path.with_name(self.path.name + ".metadata").write_text(
            f"{self.tokenizer_name}|{self.token_size}\n{self.num_tokens}\n"
            f"{human_count(self.num_tokens)}", encoding="utf-8")
        return self.path


class MegatronDocumentWriter:
    """A MegatronWriter that, like DatatroveWriter, leaves no files when it got no document."""

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

    def __init__(self, final: DocumentWriter, spool: str | os.PathLike, dtype: np.dtype,
                 seed: int) -> None:
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
                tokens = np.memmap(self.spool, self.dtype, "r") if lengths.sum() else \
                    np.zeros(0, self.dtype)
                starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
                order = np.random.default_rng(self.seed).permutation(lengths.size)
                for lo in range(0, order.size, REPLAY_GROUP):
                    group = order[lo:lo + REPLAY_GROUP]
                    self.final.add_many([tokens[starts[i]:starts[i] + lengths[i]] for i in group])
                del tokens
        finally:
            self.spool.unlink(missing_ok=True)
        return self.final.close()
