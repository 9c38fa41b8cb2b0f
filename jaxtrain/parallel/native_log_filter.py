"""Keeping JAX's native report of a lost coordinator out of a multi-process run's log.

When process 0, which serves the coordination service, dies, jaxlib's client aborts every
other process from a background thread: a C++ fatal log (`F... client.h:80] Terminating
process because the JAX distributed service detected fatal errors ... UNAVAILABLE ...`), the
warnings that led to it and a `*** Check failure stack trace: ***` of a dozen native frames.
No Python runs before it and jaxlib offers no hook (see `peer_watch`); jaxtrain's own line,
"lost the coordinator at ...", comes after it (`peer_watch.install_abort_report`).

So in the processes of a multi-process run other than 0, file descriptor 2 goes through a
helper process (this file, run as a script). The helper passes every byte on as it comes, but
holds the coordination service's own log lines back for up to `HOLD_S`: if the fatal report
of an unreachable service follows, it drops them, the report and its stack trace, and
jaxtrain's line is what the user reads. Any other fatal report, and held lines that no such
report follows, pass unchanged (held lines after what other threads wrote meanwhile).

The helper runs in a session of its own and ignores SIGINT, SIGTERM and SIGHUP (a Ctrl-C or a
scheduler's signal reaches the whole process group; the helper must outlive the process it
serves to write its last lines), and ends when the last writer closes the pipe. `finish()` waits
until the helper has written everything this process wrote, then puts the original descriptor
back, so that nothing of it is written after this process has ended. It runs at exit and
before every immediate exit (`os._exit`).
`JAXTRAIN_NATIVE_LOG=raw` turns the helper off.
"""

from __future__ import annotations

import atexit
import os
import re
import select
import signal
import subprocess
import sys
import time

HOLD_S = 2.0  # how long a coordination-service line waits for a fatal report to follow it
PARTIAL_S = 0.05  # a line without its newline yet (a progress bar's \r update) waits this long
FINISH_S = 2.0

_GLOG = re.compile(rb"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ([^:\]\s]+):\d+\] ")
SERVICE_SOURCES = (b"preemption_sync_manager.cc", b"coordination_service_agent.cc", b"client.h")
FATAL = b"Terminating process because the JAX distributed service detected fatal errors"
UNREACHABLE = b"UNAVAILABLE"
# Lines that continue a gRPC status over several lines.
CONTINUATIONS = (b"Additional GRPC error information", b":UNKNOWN:", b":UNAVAILABLE:")
TRACE_HEADER = b"*** Check failure stack trace: ***"
FRAME = b"    @ "
# What `finish` writes, never passed on: the helper answers it once all before it is written.
FLUSH = b"\0jaxtrain-native-log-filter: flush\0"


class Filter:
    """The line filter (see the module docstring): `feed` complete lines, `due` after a pause,
    `close` at the end; each returns the bytes to write."""

    def __init__(self) -> None:
        self.held: list[bytes] = []
        self.held_since = 0.0
        self.dropping = False  # after the fatal report: its continuation and stack trace go
        self.after_frame = False

    def feed(self, line: bytes, now: float) -> bytes:
        out = self.due(now)
        glog = _GLOG.match(line)
        if self.dropping and (
            line.startswith((*CONTINUATIONS, TRACE_HEADER, FRAME))
            or (self.after_frame and not line.strip())
        ):
            self.after_frame = line.startswith(FRAME)
            return out
        self.after_frame = False
        if glog and glog.group(1) in SERVICE_SOURCES:
            if FATAL in line and UNREACHABLE in line:
                self.held, self.dropping = [], True
                return out
            if FATAL not in line:
                self.held_since = self.held_since if self.held else now
                self.held.append(line)
                return out
        elif self.held and line.startswith(CONTINUATIONS):
            self.held.append(line)
            return out
        return out + self.release() + line if glog else out + line

    def release(self) -> bytes:
        held, self.held = self.held, []
        return b"".join(held)

    def due(self, now: float) -> bytes:
        """Held lines whose fatal report did not come within HOLD_S."""
        return self.release() if self.held and now - self.held_since >= HOLD_S else b""

    def close(self) -> bytes:
        return self.release()


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def serve(source: int = 0, sink: int = 1, acknowledge: int | None = None) -> None:
    """Copies `source` to `sink` through a `Filter` until the last writer closes `source`; at
    each `FLUSH` line, writes what it holds and then one byte to `acknowledge`."""
    lines, pending, since = Filter(), b"", 0.0
    try:
        while True:
            ready, _, _ = select.select([source], [], [], PARTIAL_S)
            now = time.monotonic()
            if not ready:
                out = lines.due(now)
                if pending and now - since >= PARTIAL_S:
                    out, pending = out + pending, b""
                if out:
                    _write(sink, out)
                continue
            chunk = os.read(source, 1 << 16)
            if not chunk:
                break
            since = since if pending else now
            *complete, pending = (pending + chunk).split(b"\n")
            for line in complete:
                if line.endswith(FLUSH):  # after another thread's unfinished line, maybe
                    _write(sink, line[: -len(FLUSH)] + lines.release())
                    if acknowledge is not None:
                        os.write(acknowledge, b"\n")
                    continue
                out = lines.feed(line + b"\n", now)
                if out:
                    _write(sink, out)
        _write(sink, lines.close() + pending)
    except OSError:  # the sink is gone: nobody is left to read
        return
    except Exception:  # never lose the run's output to a defect here: copy the rest as it is
        try:
            _write(sink, lines.release() + pending)
            while chunk := os.read(source, 1 << 16):
                _write(sink, chunk)
        except OSError:
            return


# (the helper, the original descriptor 2, the read end of the helper's acknowledgements)
_HELPER: tuple[subprocess.Popen, int, int] | None = None


def start() -> bool:
    """Routes this process's file descriptor 2 through the helper; False where it is off."""
    global _HELPER
    if _HELPER is not None or os.environ.get("JAXTRAIN_NATIVE_LOG") == "raw":
        return _HELPER is not None
    sys.stderr.flush()
    original = os.dup(2)
    read_end, write_end = os.pipe()
    acknowledged, acknowledge = os.pipe()
    try:
        helper = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), str(acknowledge)],
            stdin=read_end,
            stdout=original,
            stderr=original,
            start_new_session=True,
            close_fds=True,
            pass_fds=(acknowledge,),
        )
    except OSError:
        for fd in (original, write_end, acknowledged):
            os.close(fd)
        return False
    finally:
        os.close(read_end)
        os.close(acknowledge)
    os.dup2(write_end, 2)
    os.close(write_end)
    _HELPER = (helper, original, acknowledged)
    atexit.register(finish)
    return True


def finish(timeout_s: float = FINISH_S) -> None:
    """Waits (at most `timeout_s`) until the helper has written everything this process wrote,
    then gives file descriptor 2 back. The helper itself ends with the last writer: other
    processes that inherited the descriptor (multiprocessing's resource tracker) may outlive
    this one."""
    global _HELPER
    if _HELPER is None:
        return
    _, original, acknowledged = _HELPER
    _HELPER = None
    try:
        sys.stderr.flush()
        os.write(2, FLUSH + b"\n")
        select.select([acknowledged], [], [], timeout_s)
    except Exception:  # a closed stderr or a helper already gone: nothing left to wait for
        pass
    os.dup2(original, 2)
    for fd in (original, acknowledged):
        os.close(fd)


if __name__ == "__main__":
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    serve(acknowledge=int(sys.argv[1]) if len(sys.argv) > 1 else None)
