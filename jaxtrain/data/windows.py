"""The token pool over shards, and the random-access source of training windows cut from it.

Pool. The shards (or document ranges of them, when `data.split` carves a dataset) are
concatenated, in order, into one virtual token sequence, as the prime-rl docs describe.

Windowing, `data.windowing`:
- "pool" (default): window i is `pool[i * seq_len : i * seq_len + seq_len + 1]`. Windows span
  documents and shards; neighbouring windows share one token, so every token except the very
  first is a target exactly once (Megatron's GPT sampler does the same). The pool's tail, fewer
  than seq_len tokens after the last whole window, is never read: at most seq_len tokens of the
  whole pool, whatever the number of shards.
- "per_file": each file (shard, or its part under `data.split`) on its own is cut into
  non-overlapping windows of seq_len + 1 tokens and each file's tail is dropped, as datatrove's
  `DatatroveFolderDataset` does. Windows never cross files; up to seq_len tokens per file are lost
  and the token between two windows is never a target.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from jaxtrain.data.documents import DocumentOptions, boundary_fields
from jaxtrain.data.errors import DataError

# Tokens per np.max call when scanning for out-of-vocabulary ids: large enough to run at memory
# speed, small enough to keep the working set a few tens of MB.
SCAN_CHUNK = 1 << 24
WINDOWINGS = ("pool", "per_file")


def _outside_vocab(shard: Any, offset: int, vocab_size: int) -> DataError:
    """The error for the token at `offset` of `shard`, whose id is outside the vocabulary."""
    return DataError(
        f"{shard.path}: token id {int(shard.tokens[offset])} at token {offset} is outside "
        f"the model's vocab size {vocab_size} (model.vocab_size); the shard was tokenized with "
        f"{shard.tokenizer_name or 'an unrecorded tokenizer'!r}. Use a model whose vocabulary "
        "covers that tokenizer, or tokenize the corpus with the model's tokenizer."
    )


class TokenPool:
    """Shards (or token ranges of them) concatenated into one sequence; reads cross boundaries.

    A shard is anything with datatrove `Shard`'s attributes (`tokens`, `doc_ends`, `num_tokens`,
    `has_loss`, `loss_mask`, `path`, `tokenizer_name`): a datatrove shard or a Megatron file.
    `ranges[k] = (first, end)` restricts shard k to those tokens (document-aligned).
    """

    def __init__(
        self, shards: Sequence[Any], ranges: Sequence[tuple[int, int]] | None = None
    ) -> None:
        if not shards:
            raise DataError("a token pool needs at least one non-empty shard.")
        self.shards = list(shards)
        self.ranges = (
            [(0, s.num_tokens) for s in self.shards]
            if ranges is None
            else [(int(a), int(b)) for a, b in ranges]
        )
        sizes = np.array([b - a for a, b in self.ranges], np.int64)
        # offsets[k] is the pool position of piece k's first token; offsets[-1] is the pool size.
        self.offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(sizes)])
        self.has_loss = any(s.has_loss for s in self.shards)
        self._max_id: dict[int, int] = {}  # shard number -> largest token id, once scanned

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def paths(self) -> list[str]:
        """The shard files, in pool order."""
        return [str(s.path) for s in self.shards]

    @property
    def piece_sizes(self) -> np.ndarray:
        """Tokens of each piece (shard or shard range), in pool order."""
        return np.diff(self.offsets)

    def _spans(self, start: int, length: int) -> Iterator[tuple[int, int, int, int]]:
        """(piece k, first, end in shard tokens, out offset) covering pool[start:start+length]."""
        if start < 0 or length < 0 or start + length > len(self):
            raise IndexError(
                f"pool[{start}:{start + length}] is outside the pool of {len(self)} tokens."
            )
        if length == 0:
            return
        first = int(np.searchsorted(self.offsets, start, side="right")) - 1
        last = int(np.searchsorted(self.offsets, start + length, side="left")) - 1
        # A handful of shards at most per window: the loop is over shards, never tokens.
        for k in range(first, last + 1):
            base, shift = int(self.offsets[k]), self.ranges[k][0]
            lo, hi = max(start, base), min(start + length, int(self.offsets[k + 1]))
            yield k, lo - base + shift, hi - base + shift, lo - start

    def read(self, start: int, length: int) -> np.ndarray:
        """Tokens pool[start:start+length] as int32, copied out of the memory maps."""
        out = np.empty(length, np.int32)
        for k, lo, hi, at in self._spans(start, length):
            out[at : at + hi - lo] = self.shards[k].tokens[lo:hi]
        return out

    def locate(self, position: int) -> tuple[Any, int]:
        """(shard, token offset in that shard's file) of pool position `position`."""
        k = int(np.searchsorted(self.offsets, position, side="right")) - 1
        return self.shards[k], position - int(self.offsets[k]) + self.ranges[k][0]

    def read_loss(self, start: int, length: int) -> np.ndarray:
        """Loss weights of pool[start:start+length] as float32: `.ds.loss` bytes, else ones."""
        out = np.ones(length, np.float32)
        if not self.has_loss:
            return out
        for k, lo, hi, at in self._spans(start, length):
            mask = self.shards[k].loss_mask
            if mask is not None:
                out[at : at + hi - lo] = mask[lo:hi]
        return out

    def doc_ends_in(self, start: int, length: int) -> np.ndarray:
        """Pool positions e with start < e <= start + length where a new document starts.

        Binary searches in each shard's memory-mapped index: a few pages per window.
        """
        found = []
        for k, lo, hi, at in self._spans(start, length):
            ends = self.shards[k].doc_ends
            # Keys of the index's own dtype: a Python int against uint64 makes numpy convert
            # the whole index on every call (O(documents) instead of O(log documents)).
            keys = np.array([lo, hi], ends.dtype)
            i0, i1 = (int(i) for i in np.searchsorted(ends, keys, side="right"))
            if i1 > i0:
                found.append(np.asarray(ends[i0:i1], np.int64) - lo + at + start)
        return np.concatenate(found) if found else np.zeros(0, np.int64)

    def validate_vocab(self, vocab_size: int, max_tokens_per_shard: int | None = None) -> int:
        """Raises DataError when a token id is >= vocab_size; returns the largest id seen.

        Scans whole shards in chunks with np.max (memory speed); `max_tokens_per_shard` limits
        the scan to each shard's head for pools too large to read whole at start-up.
        """
        largest = -1
        for k, shard in enumerate(self.shards):
            n = (
                shard.num_tokens
                if max_tokens_per_shard is None
                else min(shard.num_tokens, max_tokens_per_shard)
            )
            if k in self._max_id and self._max_id[k] < vocab_size:
                largest = max(largest, self._max_id[k])
                continue
            shard_max = -1
            for lo in range(0, n, SCAN_CHUNK):
                chunk = shard.tokens[lo : min(n, lo + SCAN_CHUNK)]
                chunk_max = int(chunk.max())
                # Megatron files may hold signed ids; datatrove's are unsigned.
                negative = chunk.dtype.kind != "u" and int(chunk.min()) < 0
                if chunk_max >= vocab_size or negative:
                    bad = (chunk >= vocab_size) | (chunk < 0)
                    raise _outside_vocab(shard, lo + int(np.argmax(bad)), vocab_size)
                shard_max = max(shard_max, chunk_max)
            if n == shard.num_tokens:
                self._max_id[k] = shard_max
            largest = max(largest, shard_max)
        return largest


class WindowSource:
    """Random-access source (grain `RandomAccessDataSource`) of training windows over a pool.

    Item i is {"inputs": int32[seq_len], "targets": int32[seq_len], "loss_mask": float32[seq_len]}
    and, when `documents` asks, "segment_ids" / "positions" int32[seq_len]. Targets are the inputs
    shifted by one; the loss mask is that of the target tokens (`.ds.loss`, else ones), times the
    EOD mask when asked. See the module docstring for the two windowings. Once `validate_vocab`
    has run, every window read is checked against that vocabulary as well (one reduction over
    its tokens), since the start-up scan of a large pool reads only each shard's head.
    """

    def __init__(
        self,
        pool: TokenPool,
        seq_len: int,
        windowing: str = "pool",
        documents: DocumentOptions | None = None,
    ) -> None:
        if seq_len <= 0:
            raise DataError(f"seq_len={seq_len} must be positive.")
        if windowing not in WINDOWINGS:
            raise DataError(f"data.windowing={windowing!r} is not one of {WINDOWINGS}.")
        self.pool = pool
        self.seq_len = int(seq_len)
        self.windowing = windowing
        self.documents = documents or DocumentOptions()
        self.vocab_size: int | None = None  # set by validate_vocab: then every read is checked
        if windowing == "pool":
            self._len = max(0, (len(pool) - 1) // self.seq_len)
        else:
            per_file = pool.piece_sizes // (self.seq_len + 1)
            # first_window[k] is the number of windows in pieces before k.
            self._first_window = np.concatenate([np.zeros(1, np.int64), np.cumsum(per_file)])
            self._len = int(self._first_window[-1])
        if self._len <= 0 and windowing == "pool":
            raise DataError(
                f"the shards {', '.join(pool.paths)} hold {len(pool)} tokens in all, fewer than "
                f"one window of seq_len + 1 = {self.seq_len + 1} tokens. Add data or shorten "
                "train.seq_len."
            )
        if self._len <= 0:
            raise DataError(
                f"no file of {', '.join(pool.paths)} holds one window of seq_len + 1 = "
                f"{self.seq_len + 1} tokens (the largest holds {int(pool.piece_sizes.max())}), and "
                "data.windowing='per_file' never crosses files. Add data, shorten train.seq_len "
                "or use data.windowing='pool'."
            )

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return (
            f"WindowSource({len(self.pool.shards)} shards, {len(self.pool)} tokens, "
            f"seq_len={self.seq_len}, windowing={self.windowing}, windows={self._len})"
        )

    def window_start(self, index: int) -> int:
        """The pool position of window `index`'s first token."""
        if self.windowing == "pool":
            return index * self.seq_len
        k = int(np.searchsorted(self._first_window, index, side="right")) - 1
        return int(self.pool.offsets[k]) + (index - int(self._first_window[k])) * (self.seq_len + 1)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        index = int(index)
        if not 0 <= index < self._len:
            raise IndexError(f"window {index} is outside 0..{self._len - 1}.")
        start = self.window_start(index)
        tokens = self.pool.read(start, self.seq_len + 1)
        # One pass: seen as uint32, negative ids (signed Megatron files, uint32 ids past int32)
        # are huge, so a single max catches both ends.
        if self.vocab_size is not None and int(tokens.view(np.uint32).max()) >= self.vocab_size:
            bad = int(np.argmax(tokens.view(np.uint32) >= self.vocab_size))
            raise _outside_vocab(*self.pool.locate(start + bad), self.vocab_size)
        item = {
            "inputs": tokens[:-1],
            "targets": tokens[1:],
            "loss_mask": self.pool.read_loss(start + 1, self.seq_len),
        }
        if self.documents.needs_boundaries:
            ends = self.pool.doc_ends_in(start, self.seq_len) - start
            fields, keep = boundary_fields(ends, self.seq_len, self.documents)
            item.update(fields)
            if keep is not None:
                item["loss_mask"] *= keep
        return item

    def validate_vocab(self, vocab_size: int, max_tokens_per_shard: int | None = None) -> int:
        """Checks token ids against the model's vocabulary (see TokenPool.validate_vocab), and
        from then on the ids of every window read."""
        largest = self.pool.validate_vocab(vocab_size, max_tokens_per_shard)
        self.vocab_size = int(vocab_size)
        return largest
