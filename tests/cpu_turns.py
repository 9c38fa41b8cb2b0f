"""Turns at the machine's CPUs between the test workers: any number of tests at once, or one
test marked `alone` (tests that time processes against each other) with the others waiting.

A readers-writer lock of two files under `flock`: every test holds `cpus.lock` shared, an
`alone` test holds it exclusive. `gate.lock` gives the exclusive turn priority: a test waiting
to run alone holds the gate, which a test must pass (shared, for a moment) before it takes its
shared turn, so the other worker's next tests cannot keep the CPUs from it forever.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def turn(folder: Path, alone: bool) -> Iterator[None]:
    """Holds a turn at the CPUs while the block runs: exclusive if `alone`, else shared."""
    folder.mkdir(parents=True, exist_ok=True)
    gate, cpus = folder / "gate.lock", folder / "cpus.lock"
    if alone:
        with _locked(gate, fcntl.LOCK_EX), _locked(cpus, fcntl.LOCK_EX):
            yield
        return
    with _locked(gate, fcntl.LOCK_SH):
        pass  # waits while a test waiting to run alone holds the gate
    with _locked(cpus, fcntl.LOCK_SH):
        yield
