"""How grain reads ahead: reader threads and worker processes, as `data.prefetch` and
`data.worker_count` ask; shared by the shard pipeline and the raw-text stream.

grain's worker processes outlived a trainer ended by SIGKILL (the OOM killer, a launcher
without process groups): nothing told them, and each kept its memory, its open shards and its
place in the process table. Each worker now watches the process that started it and ends
itself within `PARENT_POLL_S` of that process's end (`exit_with_parent`)."""

from __future__ import annotations

import functools
import os
import threading
import time
from typing import Any

import grain

# How often a worker process checks that the process which started it is still there.
PARENT_POLL_S = 1.0


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


def exit_with_parent(creator: int, worker_index: int, worker_count: int) -> None:
    """Run first in each worker process (grain's `worker_init_fn`, `creator` bound to the
    process id of the process that started it): a daemon thread ends the worker once that
    process is gone. An orphan is handed to another parent (init or a subreaper), so its
    parent's process id changes; polling works wherever `os.getppid` does, where Linux's
    parent-death signal would follow the parent's thread, not its process.

    A worker that starts slowly (a loaded machine) may run this after its creator died: its
    parent is then already another process. So is it where workers are started through a
    server process. Either way it then watches whether the creator still exists."""
    if os.getppid() == creator:
        gone = lambda: os.getppid() != creator  # noqa: E731
    else:
        gone = lambda: not _exists(creator)  # noqa: E731

    def watch() -> None:
        while not gone():
            time.sleep(PARENT_POLL_S)
        os._exit(1)  # no cleanup: the queues it would flush lead to the dead process

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _exists(pid: int) -> bool:
    """Whether a process `pid` exists (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user's
    return True


def iterate(ds: grain.MapDataset, prefetch: int, workers: int) -> Any:
    """An iterator over `ds`, read ahead by threads and, with `workers` > 0, by that many
    worker processes (each computes every workers-th element; the order stays that of `ds`)."""
    it = ds.to_iter_dataset(read_options(prefetch))
    if workers > 0:
        allow_worker_processes()
        it = it.mp_prefetch(
            grain.MultiprocessingOptions(
                num_workers=workers, per_worker_buffer_size=max(1, prefetch)
            ),
            worker_init_fn=functools.partial(exit_with_parent, os.getpid()),
        )
    return iter(it)
