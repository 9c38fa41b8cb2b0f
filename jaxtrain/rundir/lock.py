"""One trainer per run directory: a lock file held while a trainer is open.

Two trainers on one run directory would interleave their records in metrics.jsonl and race
each other's checkpoints (a starting writer removes the other's unfinished saves). A trainer
therefore takes an exclusive `fcntl.flock` on `<run dir>/.jaxtrain.lock` and writes its pid and
host into it; a second one is refused with one line naming the holder.

The operating system drops a flock when its process dies, however it dies, so a crashed run
never blocks the next one: the next trainer gets the lock, finds the dead holder's record and
says it takes over. On filesystems without flock support (some network mounts) the record
alone decides: a holder on this host whose pid is gone is taken over; a live one, or one on
another host (which cannot be checked from here), refuses the start.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxtrain.errors import JaxtrainError
from jaxtrain.rundir.disk_full import disk_full_error, is_disk_full

LOCK_NAME = ".jaxtrain.lock"
# flock on a filesystem that does not support it (NFS without lockd, some FUSE mounts).
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL}


# Run directories locked by this process: without flock, the pid alone cannot tell two trainers
# of one notebook apart.
_HELD: set[Path] = set()


class RunLockError(JaxtrainError, RuntimeError):
    """Another trainer holds the run directory; the message names its pid and host."""


class RunDirError(JaxtrainError, OSError):
    """The run directory cannot be created or written (read-only, a file in the way, ...)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def _holder(record: dict[str, Any]) -> str:
    if not record.get("pid"):
        return "another process, which has not recorded its pid yet"
    return f"pid {record['pid']} on host {record.get('host', '?')}"


class RunLock:
    """The lock of one run directory; `acquire` takes it or raises RunLockError."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir).absolute()
        self.path = self.run_dir / LOCK_NAME
        self._file: Any = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._file is not None

    def _record(self) -> dict[str, Any]:
        self._file.seek(0)
        text = self._file.read().strip()
        try:
            record = json.loads(text) if text else {}
        except ValueError:  # a torn record: whoever wrote it is not holding a valid lock
            return {"pid": None, "note": text[:80]}
        return record if isinstance(record, dict) else {}

    def _busy(self, record: dict[str, Any], extra: str = "") -> RunLockError:
        if (record.get("pid"), record.get("host")) == (os.getpid(), socket.gethostname()):
            extra += " The holder is this process (another Trainer): close() it first."
        return RunLockError(
            f"run directory {self.run_dir} is in use by another trainer ({_holder(record)}; "
            f"lock file {self.path}): wait for it to finish or stop it, or point run.dir at "
            f"another folder.{extra}"
        )

    def acquire(self, log: Callable[[str], None] = print) -> None:
        """Takes the lock (RunLockError when another live trainer holds it); a dead holder's
        lock is taken over with a line sent to `log`."""
        if self.held:
            return
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            # "a+" neither truncates (the holder's record stays readable) nor fails if present.
            self._file = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 (until release)
        except OSError as e:
            if is_disk_full(e):
                raise disk_full_error(self.run_dir, f"creating {LOCK_NAME}") from e
            raise RunDirError(
                f"run directory {self.run_dir} is not writable ({e.strerror or e}); nothing was "
                "trained. Point run.dir at a folder this process can write, or fix its "
                "permissions."
            ) from e
        try:
            record = self._lock()
        except BaseException:
            self._file.close()
            self._file = None
            raise
        if record.get("pid") and (record.get("pid"), record.get("host")) != (
            os.getpid(),
            socket.gethostname(),
        ):
            log(
                f"taking over the lock of run directory {self.run_dir} left by "
                f"{_holder(record)}, which stopped without releasing it"
            )
        _HELD.add(self.path)
        try:
            self._file.seek(0)
            self._file.truncate()
            self._file.write(
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "host": socket.gethostname(),
                        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                    }
                )
                + "\n"
            )
            self._file.flush()
        except OSError as e:
            self.release()
            if is_disk_full(e):
                raise disk_full_error(self.run_dir, f"writing {LOCK_NAME}") from e
            raise

    def _lock(self) -> dict[str, Any]:
        """Locks the open file; returns the record of the previous holder (if any)."""
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise self._busy(self._record()) from None
        except OSError as e:
            if e.errno not in _NO_FLOCK:
                raise
            return self._check_record()
        return self._record()

    def _check_record(self) -> dict[str, Any]:
        """Without flock: refuses unless the recorded holder is provably gone."""
        record = self._record()
        pid = record.get("pid")
        if not pid:
            return record
        if record.get("host") != socket.gethostname():
            raise self._busy(
                record,
                f" This filesystem has no file locks, so whether that "
                f"trainer still runs cannot be checked from here: if it "
                f"has stopped, delete {self.path}.",
            )
        if self.path in _HELD or (int(pid) != os.getpid() and _alive(int(pid))):
            raise self._busy(record)
        return record

    def release(self) -> None:
        """Clears the record and drops the lock (idempotent)."""
        if self._file is None:
            return
        try:
            self._file.seek(0)
            self._file.truncate()
            self._file.flush()
        except OSError:  # a full or vanished disk must not hide the error being reported
            pass
        finally:
            try:
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            except OSError:
                pass
            self._file.close()
            self._file = None
            _HELD.discard(self.path)
