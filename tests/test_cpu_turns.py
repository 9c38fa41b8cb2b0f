"""The test workers' turns at the CPUs (tests/cpu_turns.py): shared turns run together, an
`alone` turn waits for them and runs by itself, and turns asked for after it wait for it."""

from __future__ import annotations

import threading
import time

import cpu_turns


def test_an_alone_turn_runs_by_itself_and_before_later_shared_turns(tmp_path):
    events: list[str] = []
    first_running, release_first = threading.Event(), threading.Event()

    def shared(name: str, hold: threading.Event | None = None) -> None:
        with cpu_turns.turn(tmp_path, alone=False):
            events.append(f"{name} starts")
            if hold is not None:
                first_running.set()
                hold.wait(10)
            events.append(f"{name} ends")

    def alone() -> None:
        with cpu_turns.turn(tmp_path, alone=True):
            events.append("alone starts")
            time.sleep(0.2)
            events.append("alone ends")

    first = threading.Thread(target=shared, args=("first", release_first))
    first.start()
    assert first_running.wait(10)
    waiting = threading.Thread(target=alone)
    waiting.start()
    time.sleep(0.3)  # the alone turn now waits for the first, holding the gate
    later = threading.Thread(target=shared, args=("later",))
    later.start()
    time.sleep(0.3)
    assert events == ["first starts"]
    release_first.set()
    for thread in (first, waiting, later):
        thread.join(10)
    assert events == ["first starts", "first ends", "alone starts", "alone ends", "later starts",
                      "later ends"]  # fmt: skip
