"""The quick soak prints its seed when it starts and its report at the end of the run."""

from __future__ import annotations

import pytest

REPORTS: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for report in REPORTS:
        terminalreporter.write_sep("=", "quick soak")
        terminalreporter.write_line(report)
