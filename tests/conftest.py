"""Shared pytest setup: the real services' fixtures and the operator's own test support.

Integration (``tests/integration``) and end-to-end (``tests/e2e``, ``tests/faults``) tests run
against a real kube-apiserver + etcd + kwok and a real redis-server, all started on loopback by
the fixtures in ``tests/support``. Unit tests (``tests/unit``) need none of them.
"""

from __future__ import annotations

pytest_plugins = [
    "tests.support.fixtures_cluster",
    "tests.support.fixtures_services",
    "tests.support.fixtures_operator",
]
