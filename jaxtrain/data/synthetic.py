"""Synthetic (mock) token windows for benchmarks, smoke tests and Megatron's `mock_data`.

Window i is drawn from a generator seeded by (seed, i), so any process or worker that asks for
window i gets the same tokens without reading anything or sharing state.
"""

from __future__ import annotations

import numpy as np

# Windows in a synthetic epoch: large enough never to wrap in a real run, and within the 32-bit
# range grain's index shuffle accepts.
DEFAULT_LENGTH = 2**31 - 1


class SyntheticSource:
    """Random-access source of deterministic pseudo-random windows, shaped like WindowSource's."""

    def __init__(
        self, vocab_size: int, seq_len: int, seed: int = 0, length: int = DEFAULT_LENGTH
    ) -> None:
        if vocab_size <= 0 or seq_len <= 0 or length <= 0:
            raise ValueError(
                f"vocab_size={vocab_size}, seq_len={seq_len} and length={length} "
                "must all be positive."
            )
        self.vocab_size = int(vocab_size)
        self.seq_len = int(seq_len)
        self.seed = int(seed)
        self._len = int(length)

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return (
            f"SyntheticSource(vocab_size={self.vocab_size}, seq_len={self.seq_len}, "
            f"seed={self.seed})"
        )

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        index = int(index)
        if not 0 <= index < self._len:
            raise IndexError(f"window {index} is outside 0..{self._len - 1}.")
        rng = np.random.default_rng([self.seed, index])
        tokens = rng.integers(0, self.vocab_size, self.seq_len + 1, dtype=np.int32)
        return {
            "inputs": tokens[:-1],
            "targets": tokens[1:],
            "loss_mask": np.ones(self.seq_len, np.float32),
        }
