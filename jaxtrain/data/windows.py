"""The token pool over every shard, and the random-access source of training windows cut from it.

All shards of all `data.paths` are concatenated, in order, into one virtual token sequence (the
pool), as the prime-rl docs describe; windows may therefore span documents and shards. Window i is
`pool[i * seq_len : i * seq_len + seq_len + 1]`: neighbouring windows share one token, so every
token except the very first is a target exactly once (Megatron's GPT sampler does the same).
The tail of the pool shorter than a whole window is never read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from jaxtrain.data.datatrove import Shard
from jaxtrain.data.errors import DataError

# Tokens per np.max call when scanning for out-of-vocabulary ids: large enough to run at memory
# speed, small enough to keep the working set a few tens of MB.
SCAN_CHUNK = 1 << 24


class TokenPool:
    """Shards concatenated into one token sequence; `read` slices across shard boundaries."""

    def __init__(self, shards: Sequence[Shard]) -> None:
        if not shards:
            raise DataError("a token pool needs at least one non-empty shard.")
        self.shards = list(shards)
        sizes = np.array([s.num_tokens for s in self.shards], np.int64)
        # offsets[k] is the pool position of shard k's first token; offsets[-1] is the pool size.
        self.offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(sizes)])
        self.has_loss = any(s.has_loss for s in self.shards)
        self._max_id: dict[int, int] = {}  # shard number -> largest token id, once scanned

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def paths(self) -> list[str]:
        """The shard files, in pool order."""
        return [str(s.path) for s in self.shards]

    def _spans(self, start: int, length: int) -> Iterator[tuple[Shard, int, int, int]]:
        """(shard, first, end, out offset) of each shard piece covering pool[start:start+length]."""
        if start < 0 or length < 0 or start + length > len(self):
            raise IndexError(f"pool[{start}:{start + length}] is outside the pool of "
                             f"{len(self)} tokens.")
        if length == 0:
            return
        first = int(np.searchsorted(self.offsets, start, side="right")) - 1
        last = int(np.searchsorted(self.offsets, start + length, side="left")) - 1
        # A handful of shards at most per window: the loop is over shards, never tokens.
        for k in range(first, last + 1):
            base = int(self.offsets[k])
            lo, hi = max(start, base), min(start + length, int(self.offsets[k + 1]))
            yield self.shards[k], lo - base, hi - base, lo - start

    def read(self, start: int, length: int) -> np.ndarray:
        """Tokens pool[start:start+length] as int32, copied out of the memory maps."""
        out = np.empty(length, np.int32)
        for shard, lo, hi, at in self._spans(start, length):
            out[at:at + hi - lo] = shard.tokens[lo:hi]
        return out

    def read_loss(self, start: int, length: int) -> np.ndarray:
        """Loss weights of pool[start:start+length] as float32: `.ds.loss` bytes, else ones."""
        out = np.ones(length, np.float32)
        if not self.has_loss:
            return out
        for shard, lo, hi, at in self._spans(start, length):
            mask = shard.loss_mask
            if mask is not None:
                out[at:at + hi - lo] = mask[lo:hi]
        return out

    def validate_vocab(self, vocab_size: int, max_tokens_per_shard: int | None = None) -> int:
        """Raises DataError when a token id is >= vocab_size; returns the largest id seen.

        Scans in chunks with np.max (memory speed); `max_tokens_per_shard` limits the scan to each
        shard's head for pools too large to read whole at start-up. Full scans are remembered.
        """
        largest = -1
        for k, shard in enumerate(self.shards):
            n = shard.num_tokens if max_tokens_per_shard is None else min(
                shard.num_tokens, max_tokens_per_shard)
            if k in self._max_id and self._max_id[k] < vocab_size:
                largest = max(largest, self._max_id[k])
                continue
            shard_max = -1
            for lo in range(0, n, SCAN_CHUNK):
                chunk = shard.tokens[lo:min(n, lo + SCAN_CHUNK)]
                chunk_max = int(chunk.max())
                if chunk_max >= vocab_size:
                    pos = lo + int(np.argmax(chunk >= vocab_size))
                    raise DataError(
                        f"{shard.path}: token id {int(chunk[pos - lo])} at token {pos} is >= the "
                        f"model's vocab size {vocab_size} (model.vocab_size); the shard was "
                        f"tokenized with {shard.tokenizer_name!r}. Use a model whose vocabulary "
                        "covers that tokenizer, or tokenize the corpus with the model's tokenizer.")
                shard_max = max(shard_max, chunk_max)
            if n == shard.num_tokens:
                self._max_id[k] = shard_max
            largest = max(largest, shard_max)
        return largest


class WindowSource:
    """Random-access source (grain `RandomAccessDataSource`) of training windows over a pool.

    Item i is {"inputs": int32[seq_len], "targets": int32[seq_len], "loss_mask": float32[seq_len]}
    from window i = pool[i*seq_len : i*seq_len + seq_len + 1]; targets are inputs shifted by one
    and the loss mask is that of the target tokens (`.ds.loss`, else ones). There are
    (len(pool) - 1) // seq_len windows; the shorter tail is dropped.
    """

    def __init__(self, pool: TokenPool, seq_len: int) -> None:
        if seq_len <= 0:
            raise DataError(f"seq_len={seq_len} must be positive.")
        self.pool = pool
        self.seq_len = int(seq_len)
        self._len = (len(pool) - 1) // self.seq_len
        if self._len <= 0:
            raise DataError(
                f"the shards {', '.join(pool.paths)} hold {len(pool)} tokens in all, fewer than "
                f"one window of seq_len + 1 = {self.seq_len + 1} tokens. Add data or shorten "
                "train.seq_len.")

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return (f"WindowSource({len(self.pool.shards)} shards, {len(self.pool)} tokens, "
                f"seq_len={self.seq_len}, windows={self._len})")

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        index = int(index)
        if not 0 <= index < self._len:
            raise IndexError(f"window {index} is outside 0..{self._len - 1}.")
        start = index * self.seq_len
        tokens = self.pool.read(start, self.seq_len + 1)
        return {
            "inputs": tokens[:-1],
            "targets": tokens[1:],
            "loss_mask": self.pool.read_loss(start + 1, self.seq_len),
        }

    def read_rows(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """The windows `indices` stacked into a batch dict of [len(indices), seq_len] arrays."""
        items = [self[i] for i in indices]
        return {key: np.stack([item[key] for item in items]) for key in items[0]}

    def validate_vocab(self, vocab_size: int, max_tokens_per_shard: int | None = None) -> int:
        """Checks every token id against the model's vocabulary; see TokenPool.validate_vocab."""
        return self.pool.validate_vocab(vocab_size, max_tokens_per_shard)
