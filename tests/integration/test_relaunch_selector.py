"""A Swarm change finds the Executions it may relaunch by ``status.phase=Invalid``, which the API
server selects (the Execution CRD's ``selectableFields``, Kubernetes 1.31 and later: an older
server refuses the list). It runs on the oldest Kubernetes the chart allows too (``compat``)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import clients
from agentihooks_swarm.lifecycle import status
from agentihooks_swarm.swarm import relaunch
from tests.support import builders, watching

pytestmark = [pytest.mark.integration, pytest.mark.compat]

SWARM = "sel"
#: The Swarm as it is now: uid ``u``, generation 2.
NOW = {"metadata": {"name": SWARM, "uid": "u", "generation": 2}}


async def test_a_swarm_change_relaunches_only_its_invalid_executions_refused_for_an_older_version(
    admin_api: client.ApiClient, namespace: str, swarm_crds: list[str]
) -> None:
    cases: dict[str, tuple[str, dict[str, Any]]] = {
        "stale": (SWARM, {"phase": "Invalid", "rejectedWith": "u/1"}),
        "this-version": (SWARM, {"phase": "Invalid", "rejectedWith": "u/2"}),
        "own-spec": (SWARM, {"phase": "Invalid"}),
        "running": (SWARM, {"phase": "Running", "rejectedWith": "u/1", "hand": {"handed": True}}),
        "other-swarm": ("other", {"phase": "Invalid", "rejectedWith": "u/1"}),
    }
    for name, (swarm, fields) in cases.items():
        await watching.create(admin_api, builders.execution(name=name, namespace=namespace, swarm=swarm))
        await watching.merge_patch(
            admin_api,
            namespace=namespace,
            plural="executions",
            name=name,
            body={"status": fields},
            status=True,
        )

    executions = clients.build(api=admin_api, timeout=5.0).executions
    nudged = await relaunch.after_swarm_change(executions=executions, namespace=namespace, swarm=NOW)

    assert nudged == ["stale"]
    stale = await watching.execution(admin_api, namespace=namespace, name="stale")
    assert stale["metadata"]["annotations"][status.RELAUNCH_ANNOTATION] == "u/2"
    # The server's selection itself: every Invalid one, whatever its Swarm, and nothing else.
    pages = executions.list_pages(namespace=namespace, field_selector="status.phase=Invalid", limit=2)
    invalid = [item["metadata"]["name"] async for page in pages for item in page["items"]]
    assert sorted(invalid) == ["other-swarm", "own-spec", "stale", "this-version"]
