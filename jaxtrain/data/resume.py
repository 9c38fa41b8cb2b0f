"""Whether a checkpoint's data position still means the same batches in this run.

The data-iterator state saved with a checkpoint is a batch counter; which windows batch `n`
holds is a pure function of the settings below (see `pipeline`). Resumed with other values of
any of them, the counter would silently point into other data. The trainer refuses that unless
`data.reset` asks to start reading the new data from its first batch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ml_collections import ConfigDict

from jaxtrain.config.loader import split_paths

# Settings that decide which windows a batch number reads. Synthetic data ignores the first group.
SHARD_KEYS = (
    "data.paths",
    "data.weights",
    "data.split",
    "data.windowing",
    "data.shuffle",
    "data.text_key",
    "data.eos_token",
)
ORDER_KEYS = ("data.kind", *SHARD_KEYS, "train.seq_len", "train.global_batch_size", "run.seed")
_MISSING = object()


def _get(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(tree, Mapping) or part not in tree:
            return _MISSING
        tree = tree[part]
    return tree


def _normalised(key: str, value: Any) -> Any:
    """`data/train/` and ` data/train` name the same folder; paths compare after normpath."""
    if key == "data.paths" and isinstance(value, str):
        return ",".join(os.path.normpath(p) for p in split_paths(value))
    if isinstance(value, str):
        return value.strip()
    return value


def data_changes(saved: Mapping[str, Any], cfg: ConfigDict) -> list[str]:
    """'key: checkpoint X, now Y' for every batch-order setting of `cfg` that differs from the
    config `saved` with a checkpoint (settings the saved config does not hold are skipped)."""
    current = cfg.to_dict()
    synthetic = _get(saved, "data.kind") == "synthetic" and cfg.data.kind == "synthetic"
    changes = []
    for key in ORDER_KEYS:
        if synthetic and key in SHARD_KEYS:
            continue
        before, now = _get(saved, key), _get(current, key)
        if before is _MISSING or now is _MISSING:
            continue
        if _normalised(key, before) != _normalised(key, now):
            changes.append(f"{key}: checkpoint {before!r}, now {now!r}")
    return changes


def refusal(step: int, directory: Any, changes: list[str]) -> str:
    """The message refusing to apply step `step`'s data position to changed data settings."""
    lines = [
        f"checkpoint step {step} in {directory} was saved with other data settings than "
        "this run; its saved data position would point into other batches:"
    ]
    lines += [f"  {change}" for change in changes]
    lines.append(
        "Resume with the checkpoint's values, or pass --config.data.reset=true to keep "
        "the model and optimizer state and read the new data from its first batch."
    )
    return "\n".join(lines)
