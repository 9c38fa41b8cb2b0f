"""The helper that keeps JAX's native report of a lost coordinator out of the log: on the log a
survivor really wrote, and on what it must pass unchanged."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from jaxtrain.parallel import native_log_filter

LOST_COORDINATOR = Path(__file__).parent / "fixtures" / "native_logs" / "lost_coordinator.log"


def _through_helper(data: bytes) -> bytes:
    """`data` through the helper script, as a process's file descriptor 2 would go."""
    helper = [sys.executable, "-I", native_log_filter.__file__]
    return subprocess.run(helper, input=data, capture_output=True, timeout=30, check=True).stdout


def test_a_lost_coordinator_leaves_only_jaxtrains_lines():
    raw = LOST_COORDINATOR.read_bytes()
    kept = _through_helper(raw).decode().splitlines()
    assert kept == [
        "[Gloo] Rank 1 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1",
        next(line for line in raw.decode().splitlines() if line.startswith("jaxtrain: a collec")),
        "jaxtrain train: error: lost the coordinator at 127.0.0.1:39719 (process 0 of 2): it "
        "stopped or its host is unreachable; its log says why. Run the same command on every "
        "host to resume from checkpoint step 20 in /tmp/tmpwrk56tde/run/checkpoints.",
    ]


def test_other_fatal_reports_and_lone_service_warnings_pass_unchanged():
    lines = LOST_COORDINATOR.read_bytes().splitlines(keepends=True)
    # The service reporting another task's failure, not its own loss: every line stays.
    other = b"".join(lines).replace(b"absl::Status: UNAVAILABLE", b"absl::Status: ABORTED")
    other = other.replace(b"UNAVAILABLE: Socket closed", b"ABORTED: peer failed")
    assert _through_helper(other) == other
    # Service warnings that no fatal report follows are written in their order, after what
    # other threads wrote while they were held.
    warnings = b"".join(lines[1:6])
    assert _through_helper(warnings + b"training goes on\n") == b"training goes on\n" + warnings


def test_held_lines_are_released_when_no_fatal_report_follows():
    lines = native_log_filter.Filter()
    warning = LOST_COORDINATOR.read_bytes().splitlines(keepends=True)[1]
    assert lines.feed(warning, now=0.0) == b""
    assert lines.feed(b"a python line\n", now=0.5) == b"a python line\n"
    assert lines.due(now=1.0) == b""
    assert lines.due(now=native_log_filter.HOLD_S) == warning


def test_a_line_without_its_newline_is_written_after_a_pause():
    helper = subprocess.Popen(
        [sys.executable, "-I", native_log_filter.__file__],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        helper.stdin.write(b"\rstep 10/100")
        helper.stdin.flush()
        start = time.monotonic()
        assert helper.stdout.read(len(b"\rstep 10/100")) == b"\rstep 10/100"
        assert time.monotonic() - start < 5
    finally:
        helper.stdin.close()
        helper.wait(timeout=10)


def test_everything_written_before_finish_is_out_before_the_process_ends():
    """`finish` (run before every immediate exit) waits for the helper to write this process's
    lines, then writes straight to the original stderr; the flush request never shows."""
    script = (
        "import os\n"
        "from jaxtrain.parallel import native_log_filter as f\n"
        "assert f.start()\n"
        "os.write(2, b'\\rstep 3/9')\n"
        "os.write(2, b'\\none\\n')\n"
        "f.finish()\n"
        "os.write(2, b'two\\n')\n"
        "os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert out.returncode == 0 and out.stderr == b"\rstep 3/9\none\ntwo\n", out.stderr
