"""Namespaces a test makes besides the ``namespace`` fixture's (other teams' namespaces), each with
its Pod Security level and its ``default`` ServiceAccount, deleted when the block ends."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

from tests.support.cluster import ClusterError, ControlPlane


@contextlib.contextmanager
def made(cluster: ControlPlane, *prefixes: str, level: str = "baseline") -> Iterator[list[str]]:
    """One new namespace per prefix (``PREFIX-xxxxxx``), in that order."""
    names: list[str] = []
    try:
        for prefix in prefixes:
            name = f"{prefix}-{uuid.uuid4().hex[:6]}"
            labels = {
                "pod-security.kubernetes.io/enforce": level,
                "pod-security.kubernetes.io/enforce-version": "latest",
            }
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
            cluster.request_json("POST", "/api/v1/namespaces", body)
            names.append(name)
        for name in names:
            _await_default_account(cluster, name)
        yield names
    finally:
        for name in names:
            cluster.request("DELETE", f"/api/v1/namespaces/{name}")


def _await_default_account(cluster: ControlPlane, name: str) -> None:
    """A Pod without a ServiceAccount is refused until its namespace's ``default`` exists."""
    deadline = time.monotonic() + 30
    while cluster.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] != 200:
        if time.monotonic() > deadline:
            raise ClusterError(f"namespace {name}: no default ServiceAccount after 30s")
        time.sleep(0.05)
