"""The console sink: tqdm's bar on a terminal, one plain line per record elsewhere."""

from __future__ import annotations

import io
import re

from jaxtrain.rundir.metrics import ConsoleSink


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    sink = ConsoleSink(10, stream=out)
    for step in (1, 2, 3):
        sink.write(step, {"loss": 2.5 - step / 10, "lr": 1e-3})
    sink.write(3, {"val_loss": 2.0})
    sink.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert lines[0] == "step 1/10 loss=2.4000 lr=1.000e-03 eta ?"
    assert re.fullmatch(r"step 3/10 loss=2\.2000 lr=1\.000e-03 eta \d\d:\d\d", lines[2])
    assert lines[3].startswith("step 3/10 val_loss=2.0000 eta ")


def test_a_terminal_gets_tqdms_bar_and_keeps_validation_lines() -> None:
    out = Terminal()
    sink = ConsoleSink(10, stream=out)
    sink.write(4, {"loss": 2.0})  # a resumed run: the bar starts at its first record
    sink.write(5, {"loss": 1.5})
    sink.write(5, {"val_loss": 1.25})
    sink.write(10, {"loss": 1.0})
    sink.close()
    text = out.getvalue()
    assert "\r" in text and "10/10" in text and "loss=1.0000" in text
    assert "step 5/10 val_loss=1.2500\n" in text  # a line of its own, above the bar
    assert text.endswith("\n")


def test_no_bar_when_progress_is_off() -> None:
    out = Terminal()
    sink = ConsoleSink(3, stream=out, progress=False)
    sink.write(1, {"loss": 1.0})
    sink.close()
    assert out.getvalue() == "step 1/3 loss=1.0000 eta ?\n"
