"""Integration tests: the operator's modules, in-process, against the real kube-apiserver (through
the fault proxy) and the real redis-server. Every test here is marked ``integration``."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)
