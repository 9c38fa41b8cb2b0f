"""How grain reads ahead: reader threads and worker processes, as `data.prefetch` and
`data.worker_count` ask; shared by the shard pipeline and the raw-text stream."""

from __future__ import annotations

import os
from typing import Any

import grain


def read_options(prefetch: int) -> grain.ReadOptions:
    """Reader threads and buffer for `prefetch` elements in flight."""
    prefetch = max(0, int(prefetch))
    # Each element is a whole local batch (or a document), so a few threads keep `prefetch` in
    # flight. More reader threads than half the cores only fight over them (and the GIL):
    # docs/data.md, "Speed".
    threads = min(prefetch, 8, max(1, (os.cpu_count() or 1) // 2))
    return grain.ReadOptions(num_threads=threads, prefetch_buffer_size=prefetch)


def allow_worker_processes() -> None:
    """grain <= 0.2.18 worker processes read absl flags; mark them parsed outside absl.app."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def iterate(ds: grain.MapDataset, prefetch: int, workers: int) -> Any:
    """An iterator over `ds`, read ahead by threads and, with `workers` > 0, by that many
    worker processes (each computes every workers-th element; the order stays that of `ds`)."""
    it = ds.to_iter_dataset(read_options(prefetch))
    if workers > 0:
        allow_worker_processes()
        it = it.mp_prefetch(
            grain.MultiprocessingOptions(
                num_workers=workers, per_worker_buffer_size=max(1, prefetch)
            )
        )
    return iter(it)
