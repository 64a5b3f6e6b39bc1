"""The fault matrix prints its summary (cases, faults injected, invariant violations) at the end."""

from __future__ import annotations

import pytest

from tests.faults import ledger


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if ledger.LEDGER.cases:
        terminalreporter.write_sep("=", "fault matrix")
        terminalreporter.write_line(ledger.LEDGER.summary())
