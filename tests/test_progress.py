"""The progress of the long operator commands: a bar on a terminal, plain lines in a pipe or a log."""

from __future__ import annotations

import io

from companion.ops.operator_commands import ProgressLine


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_pipe_plain_lines_every_five_percent_and_no_carriage_return() -> None:
    out = io.StringIO()
    with ProgressLine("restore", out) as progress:
        for done in range(0, 2001, 50):
            progress(done, 2000)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines[0] == "restore: 0/2000" and lines[-1] == "restore: 2000/2000"
    assert len(lines) == 21  # every 100 of 2,000, the last included


def test_on_a_terminal_a_bar() -> None:
    out = Terminal()
    with ProgressLine("backup", out) as progress:
        for done in (0, 500, 1000):
            progress(done, 1000)
    assert "\r" in out.getvalue() and "1000/1000" in out.getvalue() and "backup" in out.getvalue()
