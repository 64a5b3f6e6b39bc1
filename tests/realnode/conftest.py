"""Tests on the real node: containerd and a real kubelet run the containers (root; see
``tests/support/cluster/real_node.py``). Every test here is marked ``realnode`` and
``integration``; the host test runs first, before the session's real node is started, because a
machine has one real node at a time."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mine = [item for item in items if "tests/realnode/" in str(item.path)]
    for item in mine:
        item.add_marker(pytest.mark.realnode)
        item.add_marker(pytest.mark.integration)
    first = [item for item in mine if item.path.name == "test_host.py"]
    if first and mine:
        at = items.index(mine[0])
        rest = [item for item in items if item not in first]
        rest[at:at] = first
        items[:] = rest
