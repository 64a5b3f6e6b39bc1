"""The custom resources fuzzed against the real API server with the operator running (issue 13).

Marked ``e2e`` (the operator runs as a process); prints its tally at the end of the run.
"""

from __future__ import annotations

import pytest

from tests.fuzz import tally


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/fuzz/" in str(item.path):
            item.add_marker(pytest.mark.e2e)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if tally.TALLY.cases:
        terminalreporter.write_sep("=", "custom resource fuzz")
        terminalreporter.write_line(tally.TALLY.summary())
