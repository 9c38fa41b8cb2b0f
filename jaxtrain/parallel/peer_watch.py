"""Noticing a lost process in a multi-process run, and saying so in one line.

JAX's coordination service already tracks every process by heartbeats; when one stops, it makes
every other process abort with a C++ fatal log and a stack trace (exit 134), which names the
lost task only in the middle of that trace, and says nothing about resuming. Two pieces turn
that into one readable line and a bounded exit:

- `PeerWatch`, a daemon thread in every process, publishes a beat counter in the coordination
  service's key-value store every `interval_s` and reads the others'. A process whose counter has
  not moved for `timeout_s` is reported lost by name, and this process exits with
  `EXIT_PEER_LOST` (3). JAX's own heartbeat timeout is set longer (`jax_heartbeat_timeout`), so
  the named report comes first and JAX's abort remains the backstop.
- `install_abort_report` adds one line to the aborts this module cannot prevent: when the
  coordinator (process 0) dies, every other process loses the service at once and JAX aborts them
  from a background thread before Python can run. A C-level SIGABRT handler prints the
  `jaxtrain train: error:` line after JAX's own log and exits with the same code.

Why JAX aborts first when process 0 dies: jaxlib 0.10's client polls the service
for errors (`PollForError`), and the moment that connection drops it calls its error callback,
whose default is `LOG(FATAL)` (`client.h:80] Terminating process ...` and a stack trace); on one
host this fires about 0.2 s after process 0 is killed, so no watch timeout can come first, and
JAX's heartbeat timeout plays no part. The callback is the client's `missed_heartbeat_callback`,
but it cannot be given from Python: jaxlib cannot convert the `absl::Status` it passes, and the
process ends with `std::bad_cast` instead. Error polling itself is not an option jaxlib exposes.
`native_log_filter` keeps that native report out of the log, so the abort report's line is the
one the user reads.

Neither runs in a single-process run.
"""

from __future__ import annotations

import ctypes
import dataclasses
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxtrain.parallel import native_log_filter
from jaxtrain.rundir.step_folders import latest_committed_step

EXIT_PEER_LOST = 3
KEY_PREFIX = "jaxtrain/alive/"
# A process that finished cleanly says so, so that peers still saving or evaluating do not
# take its silence for a crash; one that failed says so, so that peers stop at once.
DEPARTED = "done"
FAILED = "failed"
DEFAULT_INTERVAL_S = 2.0


def jax_heartbeat_timeout(timeout_s: int) -> int:
    """JAX's own heartbeat timeout for a watch of `timeout_s`: long enough to report first."""
    return 2 * timeout_s


@dataclasses.dataclass
class ResumeHint:
    """Where the run's checkpoints live, for the line printed when the job is lost.

    One instance per process, shared by its watch and its abort report; the trainer names the
    folder once it knows it (`distributed.report_checkpoints_in`)."""

    checkpoint_dir: Path | None = None

    def text(self) -> str:
        """How to resume, naming the latest complete checkpoint when there is one."""
        step = latest_committed_step(self.checkpoint_dir)  # names only: safe from any thread
        where = (
            f"from checkpoint step {step} in {self.checkpoint_dir}"
            if step is not None
            else "from the latest complete checkpoint"
            if self.checkpoint_dir is None
            else f"(no checkpoint yet in {self.checkpoint_dir}: it starts over)"
        )
        return f"Run the same command on every host to resume {where}."


def end_child_processes() -> None:
    """Kills this process's multiprocessing children (grain's data workers) before `os._exit`.

    A normal exit shuts them down; `os._exit` does not, and they would live on as orphans, one
    stopped or stuck among them: under Slurm they hold the job step open, so the job neither
    ends nor is requeued. SIGKILL also ends a stopped worker.
    """
    try:
        for child in multiprocessing.active_children():
            child.kill()
    except Exception:  # leaving anyway: nothing here may stop the exit
        pass


def _report(message: str) -> None:
    """One error line on stderr, written with a single system call (safe in any thread)."""
    os.write(2, f"\njaxtrain train: error: {message}\n".encode())


class PeerWatch:
    """Publishes this process's beats and exits when another process's beats stop.

    `client` is JAX's coordination-service client (key_value_set / key_value_dir_get);
    `on_lost(message)` is called once with the report instead of exiting (tests pass their own);
    `hint` says how to resume at the end of the report.
    """

    def __init__(
        self,
        client: Any,
        process_id: int,
        num_processes: int,
        *,
        timeout_s: float,
        interval_s: float = DEFAULT_INTERVAL_S,
        on_lost: Callable[[str], None] | None = None,
        hint: ResumeHint | None = None,
    ):
        self.client = client
        self.hint = hint or ResumeHint()
        self.process_id = process_id
        self.num_processes = num_processes
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.on_lost = on_lost or self._exit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jaxtrain-peer-watch", daemon=True)
        self.lost: list[int] = []

    def start(self) -> PeerWatch:
        """Starts the thread (returns self)."""
        self._thread.start()
        return self

    def wait_for_verdict(self, seconds: float) -> None:
        """Blocks up to `seconds` while the watch decides whether a peer was lost.

        A collective that failed because a peer vanished raises in the main thread before the
        watch can name the peer; waiting here lets the watch report it (and exit) first.
        """
        self._thread.join(seconds)

    def stop(self, failed: bool = False) -> None:
        """Stops watching and tells the peers why this process is leaving.

        At a clean end of the run processes leave at different moments (one may still be
        writing its part of the last checkpoint), and silence must not read as a crash; after
        an error, the peers (waiting for this process in a collective) must stop at once.
        """
        if self._stop.is_set():
            return
        self._stop.set()
        try:
            self.client.key_value_set(
                f"{KEY_PREFIX}{self.process_id}",
                FAILED if failed else DEPARTED,
                allow_overwrite=True,
            )
        except Exception:  # the service is already gone: nobody is left to tell
            pass

    @staticmethod
    def _exit(message: str) -> None:
        _report(message)
        sys.stdout.flush()
        end_child_processes()
        native_log_filter.finish()
        os._exit(EXIT_PEER_LOST)

    def _loop(self) -> None:
        beats = 0
        # Per peer: the last counter seen and when it last changed (this host's clock only).
        seen: dict[int, tuple[str, float]] = {}
        started = last_contact = time.monotonic()
        while not self._stop.is_set():
            beats += 1
            now = time.monotonic()
            try:
                self.client.key_value_set(
                    f"{KEY_PREFIX}{self.process_id}", str(beats), allow_overwrite=True
                )
                entries = self.client.key_value_dir_get(KEY_PREFIX)
            except Exception as e:  # the service is unreachable: process 0 died, or a blip
                if self._stop.is_set():
                    return
                if now - last_contact > self.timeout_s:
                    self.lost = [0]
                    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    self.on_lost(
                        f"lost contact with the coordinator (process 0 of {self.num_processes}) "
                        f"for {self.timeout_s:g} s ({first}). Process 0 stopped or its host is "
                        f"unreachable; its log says why. {self.hint.text()}"
                    )
                    return
                self._stop.wait(self.interval_s)
                continue
            last_contact = now
            departed, failed = set(), []
            for key, value in entries:
                peer = int(key.rsplit("/", 1)[-1])
                if value == DEPARTED:
                    departed.add(peer)
                elif value == FAILED:
                    failed.append(peer)
                elif peer not in seen or seen[peer][0] != value:
                    seen[peer] = (value, now)
            failed = sorted(p for p in failed if p != self.process_id)
            if failed:
                self.lost = failed
                self.on_lost(
                    f"process {', '.join(map(str, failed))} of {self.num_processes} stopped "
                    f"with an error (its log says which); process {self.process_id} stops too. "
                    f"{self.hint.text()}"
                )
                return
            # A peer that never beat is counted from the watch's start.
            stale = sorted(
                p
                for p in range(self.num_processes)
                if p != self.process_id
                and p not in departed
                and now - seen.get(p, ("", started))[1] > self.timeout_s
            )
            if stale:
                self.lost = stale
                names = ", ".join(str(p) for p in stale)
                self.on_lost(
                    f"lost process {names} of {self.num_processes}: no sign of life for "
                    f"{self.timeout_s:g} s (it crashed, was killed, or its host went down; its "
                    f"log says why). Process {self.process_id} stops too. {self.hint.text()}"
                )
                return
            self._stop.wait(self.interval_s)


def _reachable(address: str, timeout_s: float = 1.0) -> bool:
    """Whether something accepts TCP connections at HOST:PORT (the coordinator's port)."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return True  # not an address this module can probe: assume nothing
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


# Kept alive for as long as the handler is installed: ctypes frees a collected callback.
_ABORT_HANDLER: Any = None


def install_abort_report(
    process_id: int, num_processes: int, coordinator: str, hint: ResumeHint
) -> bool:
    """Prints one jaxtrain line when JAX's runtime aborts this process; False where unsupported.

    The handler runs on the aborting thread after JAX has logged its reason; it writes the line
    with one system call and exits without unwinding (the process is already going down).
    """
    global _ABORT_HANDLER
    try:
        libc = ctypes.CDLL(None)
        handler_type = ctypes.CFUNCTYPE(None, ctypes.c_int)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, handler_type]
    except (OSError, AttributeError):
        return False

    def on_abort(_signum: int) -> None:
        if process_id and not _reachable(coordinator):
            cause = (
                f"lost the coordinator at {coordinator} (process 0 of {num_processes}): it "
                "stopped or its host is unreachable; its log says why"
            )
        else:
            cause = (
                f"process {process_id} of {num_processes} was stopped by the JAX "
                "distributed runtime (the log above gives its reason: usually another "
                "process died)"
            )
        _report(f"{cause}. {hint.text()}")
        end_child_processes()
        native_log_filter.finish()
        os._exit(EXIT_PEER_LOST)

    _ABORT_HANDLER = handler_type(on_abort)
    libc.signal(signal.SIGABRT, _ABORT_HANDLER)
    return True
