"""Raw text tokenized while training: documents in grain's order, cut into training windows.

Order. The documents of all files (`text_documents.DocumentSource`) form a stream of epochs: epoch
e visits every document once, in file order without `data.shuffle`, else in grain's index-shuffle
order with seed `run.seed + e` (`MapDataset.shuffle(seed).repeat()`, the order the shard pipeline
gives its windows). Stream position n is document n % N of epoch n // N.

Tokenizing. `Tokenize` runs in grain's reader threads, or in its `data.worker_count` worker
processes (each tokenizes every W-th document; grain hands them back in stream order), and
appends the EOS id after each document, as `tools/tokenize_corpus.py` does.

Windows. In the training process the token ids of an epoch are concatenated in stream order and
cut exactly as the shard pool's "pool" windowing cuts a shard: window i is tokens
[i * seq_len, i * seq_len + seq_len + 1), neighbours sharing one token. Windows are taken
`group` at a time (a global batch); at the end of an epoch the windows that do not fill a whole
group, and the tail of fewer than seq_len + 1 tokens, are dropped, as the shard pipeline drops
them. So with `data.shuffle=false` the batches are those of the same files tokenized first with
`tools/tokenize_corpus.py --no-shuffle`, token for token. Document boundaries within a window
give `segment_ids`, `positions` and the EOD loss mask as for shards (`documents`).

State. {"doc": n, "skip": k}: the stream position of the first document still in the token
buffer and how many of its tokens were already cut away. A fresh stream given that state
re-reads from document n, so the state is small, the same in every process, and independent of
the number of worker processes.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from jaxtrain.data.batches import windows
from jaxtrain.data.documents import DocumentOptions, boundary_fields
from jaxtrain.data.errors import DataError
from jaxtrain.data.grain_options import iterate
from jaxtrain.data.text_documents import DocumentSource

NO_TOKENS = np.zeros(0, np.int32)


class Tokenize:
    """(position, text) -> (position, int32 ids + EOS); the tokenizer loads on first use in
    each process (it is not pickled into grain's workers)."""

    def __init__(self, tokenizer: str, eos_token: str) -> None:
        self.tokenizer, self.eos_token = tokenizer, eos_token
        self._encode: Callable[[list[str]], list[list[int]]] | None = None
        self._eos = -1

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_encode": None}

    def load(self) -> tuple[Callable[[list[str]], list[list[int]]], int, int]:
        """(encode, vocabulary size, EOS id), loading the tokenizer."""
        from jaxtrain.data.tokenize_tasks import load_encoder  # loads `tokenizers`

        encode, vocab, self._eos = load_encoder(self.tokenizer, self.eos_token)
        self._encode = encode
        return encode, vocab, self._eos

    def __call__(self, element: tuple[int, str]) -> tuple[int, np.ndarray]:
        position, text = element
        if not text:
            return position, NO_TOKENS
        if self._encode is None:
            self.load()
        ids = self._encode([text])[0]
        tokens = np.empty(len(ids) + 1, np.int32)
        tokens[:-1] = ids
        tokens[-1] = self._eos
        return position, tokens


def _tag(position: int, text: str) -> tuple[int, str]:
    return position, text


def document_stream(
    docs: DocumentSource,
    tokenize: Tokenize,
    *,
    shuffle: bool,
    seed: int,
    prefetch: int,
    workers: int,
    start: int,
) -> Iterator[tuple[int, np.ndarray]]:
    """(stream position, token ids) of the documents from stream position `start` on."""
    ds = windows(docs, shuffle=shuffle, seed=seed).repeat().map_with_index(_tag)
    ds = ds[start:].map(tokenize)
    return iterate(ds, prefetch, workers)


class TextWindows:
    """Groups of `group` training windows cut from a document stream; see the module doc.

    `open_stream(start=n)` returns the (position, tokens) iterator from stream position n.
    With `one_epoch`, the stream ends after the first epoch (validation).
    """

    def __init__(
        self,
        open_stream: Callable[[int], Iterator[tuple[int, np.ndarray]]],
        num_docs: int,
        seq_len: int,
        group: int,
        what: str,
        one_epoch: bool = False,
    ) -> None:
        self.open_stream, self.num_docs, self.seq_len = open_stream, num_docs, seq_len
        self.group, self.what, self.one_epoch = group, what, one_epoch
        self.set_state({"doc": 0, "skip": 0})

    def get_state(self) -> dict[str, int]:
        """Where the next group starts (JSON, the same in every process)."""
        if self._docs:
            return {"doc": int(self._docs[0][0]), "skip": int(self._skip)}
        return {"doc": int(self._fetch), "skip": 0}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continues from a state of `get_state` (of this or an earlier process)."""
        self._fetch = int(state["doc"])
        self._restore_skip = int(state["skip"])  # tokens to drop from the first document read
        self._epoch = self._fetch // self.num_docs
        # Windows cut in this epoch, counted only when the epoch was read from its start: a
        # stream resumed near an epoch's end has few windows left in it, and that is no error.
        whole = self._fetch % self.num_docs == 0 and self._restore_skip == 0
        self._epoch_windows: int | None = 0 if whole else None
        self._stream: Iterator[tuple[int, np.ndarray]] | None = None
        self._buffer, self._skip = NO_TOKENS, 0
        # [position, tokens of that document still in the buffer] per buffered document.
        self._docs: collections.deque[list[int]] = collections.deque()

    def _pull(self) -> bool:
        """Adds the next non-empty document to the buffer; False when the stream ends."""
        if self._stream is None:
            self._stream = self.open_stream(start=self._fetch)
        for position, tokens in self._stream:
            position = int(position)
            self._fetch = position + 1
            skip, self._restore_skip = self._restore_skip, 0
            if not len(tokens):
                continue
            epoch = position // self.num_docs
            if epoch != self._epoch:
                if self.one_epoch:
                    return False
                self._new_epoch(epoch)
            if not self._docs:
                self._skip = skip
            tokens = tokens[skip:]
            self._buffer = np.concatenate([self._buffer, tokens]) if self._docs else tokens
            self._docs.append([position, len(tokens)])
            return True
        return False

    def _new_epoch(self, epoch: int) -> None:
        if self._epoch_windows is not None and self._epoch_windows < self.group:
            raise DataError(
                f"{self.what} hold {self._epoch_windows} windows of train.seq_len + 1 = "
                f"{self.seq_len + 1} tokens per epoch, fewer than one global batch of "
                f"{self.group}. Add data, or lower the batch or seq_len."
            )
        self._epoch, self._epoch_windows = epoch, 0
        self._buffer, self._skip = NO_TOKENS, 0
        self._docs.clear()

    def _cut(self) -> tuple[np.ndarray, np.ndarray]:
        """The buffer's first window and its document ends; moves the buffer on by seq_len."""
        n = self.seq_len
        window = self._buffer[: n + 1]
        sizes = np.fromiter((d[1] for d in self._docs), np.int64, len(self._docs))
        ends = np.cumsum(sizes)
        ends = ends[(ends > 0) & (ends <= n)]
        self._buffer = self._buffer[n:]
        consumed = n
        while self._docs and self._docs[0][1] <= consumed:
            consumed -= self._docs.popleft()[1]
            self._skip = 0
        if self._docs:
            self._docs[0][1] -= consumed
            self._skip += consumed
        if self._epoch_windows is not None:
            self._epoch_windows += 1
        return window, ends

    def next_group(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The next `group` windows, each (tokens[seq_len + 1], document ends in (0, seq_len]).

        StopIteration at the end of a one-epoch stream."""
        group: list[tuple[np.ndarray, np.ndarray]] = []
        while len(group) < self.group:
            if len(self._buffer) >= self.seq_len + 1:
                group.append(self._cut())
                continue
            epoch = self._epoch
            if not self._pull():
                raise StopIteration
            if self._epoch != epoch:
                group = []  # an epoch's windows short of a whole group are dropped
        return group


def window_fields(
    window: np.ndarray, ends: np.ndarray, documents: DocumentOptions
) -> dict[str, np.ndarray]:
    """The fields of one row of a batch, as `windows.WindowSource` gives them for shards."""
    seq_len = len(window) - 1
    item = {
        "inputs": window[:-1],
        "targets": window[1:],
        "loss_mask": np.ones(seq_len, np.float32),
    }
    if documents.needs_boundaries:
        fields, keep = boundary_fields(ends, seq_len, documents)
        item.update(fields)
        if keep is not None:
            item["loss_mask"] *= keep
    return item


def stack(rows: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Rows (dicts of [seq_len] arrays) as one batch of [rows, seq_len] arrays."""
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


class TextBatches:
    """A process's batches of raw text: its rows of every global batch of `TextWindows`.

    An iterator with grain's `get_state`/`set_state`; every process tokenizes the whole stream
    (the window boundaries depend on every document's length) and keeps its own rows, so the
    processes' batches, concatenated in process order, are the batch one process reads alone.
    """

    def __init__(
        self,
        stream: TextWindows,
        documents: DocumentOptions,
        process_index: int,
        process_count: int,
        vocab_size: int | None = None,
        limit: int | None = None,
    ) -> None:
        self.stream, self.documents, self.vocab_size = stream, documents, vocab_size
        local = stream.group // process_count
        self.rows = slice(process_index * local, (process_index + 1) * local)
        self.limit, self.count = limit, 0

    def __iter__(self) -> TextBatches:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self.limit is not None and self.count >= self.limit:
            raise StopIteration
        try:
            group = self.stream.next_group()
        except StopIteration:
            if self.count == 0:  # validation text too short for one batch
                raise DataError(
                    f"{self.stream.what} hold fewer than one global batch of "
                    f"{self.stream.group} windows of train.seq_len + 1 = "
                    f"{self.stream.seq_len + 1} tokens. Add data, or lower the batch or seq_len."
                ) from None
            raise
        self.count += 1
        rows = [window_fields(w, e, self.documents) for w, e in group[self.rows]]
        return stack(rows)

    def get_state(self) -> dict[str, Any]:
        """The stream's state (see `TextWindows.get_state`)."""
        return {"text": self.stream.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continues from `get_state`'s result."""
        if "text" not in state:
            raise DataError(
                f"data state {state} was not saved by a raw-text run (data.kind='text'); "
                "resume with the checkpoint's data settings or pass --config.data.reset=true."
            )
        self.stream.set_state(state["text"])
