"""A full disk, reported as one line that names the folder instead of a writer's traceback.

Orbax reports a full disk from its background threads as a TensorStore `ValueError`
(`RESOURCE_EXHAUSTED: ... No space left on device [os_error_code='28']`), a plain write as
`OSError(ENOSPC)`; both are recognised here, anywhere in an exception's chain. What was
already written stays intact: metric lines are written whole (`metrics.JsonlSink`) and a
checkpoint that was being written is never committed, so a resume skips it.
"""

from __future__ import annotations

import errno
import logging
import sys
from pathlib import Path
from typing import Any

from jaxtrain.errors import JaxtrainError

_MARKERS = ("No space left on device", "os_error_code='28'", "[Errno 28]")


class DiskFullError(JaxtrainError, RuntimeError):
    """A write failed because its disk is full; the message names the folder."""


def is_disk_full(error: BaseException | None) -> bool:
    """Whether `error`, or an exception it was raised from, reports a full disk (ENOSPC)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return True
        if any(marker in str(error) for marker in _MARKERS):
            return True
        error = error.__cause__ or error.__context__
    return False


def disk_full_error(folder: Path, what: str, checkpoints: str = "") -> DiskFullError:
    """The error for a write into `folder` that found its disk full.

    `what` says which write failed; `checkpoints` says which checkpoints are intact (default:
    those already complete, without naming them).
    """
    intact = checkpoints or "checkpoints already complete are intact"
    return DiskFullError(
        f"no space left on device: {Path(folder).absolute()} is full ({what} failed). Nothing "
        f"already written is lost: {intact}, and an unfinished checkpoint is skipped on resume. "
        "Free space there (or point run.dir / checkpoint.dir at a larger disk), then run the "
        "same command to resume."
    )


class _QuietDiskFull(logging.Filter):
    """Drops log records of a full disk: the error is reported once, as DiskFullError."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            any(marker in message for marker in _MARKERS)
            or (record.exc_info and is_disk_full(record.exc_info[1]))
        )


def _ignore_closed_loop_callbacks(unraisable: Any) -> None:
    """sys.unraisablehook: drops the RuntimeError of a TensorStore write completing after the
    failed save that started it closed its event loop; passes everything else on."""
    error = unraisable.exc_value
    if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
        return
    _previous_unraisablehook(unraisable)


_previous_unraisablehook = sys.unraisablehook


def quiet_writer_logs() -> None:
    """Keeps a full disk from being reported again by the writers' own threads: Orbax (absl
    logger) and asyncio log it with tracebacks, and the other writes of the failed save end on
    a closed event loop. The trainer reports it once, as DiskFullError."""
    for name in ("absl", "asyncio"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _QuietDiskFull) for f in logger.filters):
            logger.addFilter(_QuietDiskFull())
    if sys.unraisablehook is not _ignore_closed_loop_callbacks:
        global _previous_unraisablehook
        _previous_unraisablehook = sys.unraisablehook
        sys.unraisablehook = _ignore_closed_loop_callbacks
