"""Two teams, one operator watching every namespace, the same Swarm and Execution names: a swarm's
records, refusals and budget belong to the first namespace that used its name, and a Swarm of that
name elsewhere is told so (``SlugInUse``) and shown nothing of the other team's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kubernetes_asyncio import client

from agentihooks_swarm import store as store_
from tests.support import builders, commands, namespaces, planting, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory
from tests.support.operator_process import OperatorProcess

SLUG = "ci"
PREFIX = "agentihooks-swarm"
EXECUTION = "build-42"


@pytest.fixture
def other_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A second team's namespace beside the ``namespace`` fixture's."""
    with namespaces.made(control_plane, "team-b") as [name]:
        yield name


async def _status(api: client.ApiClient, *, namespace: str, plural: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = await client.CustomObjectsApi(api).get_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, plural, name
    )
    return dict(found.get("status") or {})


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


def _records(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTIHOOKS_SWARM_REDIS_URL": redis_url}
    return subprocess.run(
        [sys.executable, "-m", "agentihooks_swarm", "records", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


async def _create_swarm_and_execution(
    api: client.ApiClient, *, namespace: str, slug: str, budget: dict[str, int] | None
) -> None:
    """What each team makes, under the same names: a Swarm (with ``budget``, or none), and an
    Execution of a project the Swarm does not register (refused, Done)."""
    await watching.create(
        api, builders.swarm(name=slug, namespace=namespace, projects=["registered"], refusal_budget=budget)
    )
    await watching.create(
        api, builders.execution(name=EXECUTION, namespace=namespace, swarm=slug, project="x")
    )


async def _execution_in_phase(
    api: client.ApiClient, process: OperatorProcess, *, namespace: str, phase: str, what: str, timeout: float
) -> dict[str, Any]:
    """The Execution's status once it is in ``phase``."""

    async def reached() -> dict[str, Any] | None:
        status = await _status(api, namespace=namespace, plural="executions", name=EXECUTION)
        return status if status.get("phase") == phase else None

    return await watching.eventually(reached, what=what, operator=process, timeout=timeout)


async def _check_team_b_swarm_told_nothing_of_a(
    api: client.ApiClient, process: OperatorProcess, *, team_b: str, slug: str
) -> None:
    """B's Swarm says SlugInUse, and shows none of A's refusals nor A's budget."""

    async def b_swarm_told() -> dict[str, Any] | None:
        status = await _status(api, namespace=team_b, plural="swarms", name=slug)
        found = _condition(status, "Invalid")
        return status if found is not None and found["reason"] == "SlugInUse" else None

    b_swarm = await watching.eventually(
        b_swarm_told, what="team B's Swarm SlugInUse", operator=process, timeout=60
    )
    assert "refusals" not in b_swarm, b_swarm
    assert _condition(b_swarm, "Degraded") is None, b_swarm


async def _check_team_a_swarm_counted(
    api: client.ApiClient, process: OperatorProcess, *, team_a: str, slug: str
) -> None:
    """A's Swarm counts its own refusal and is not told about the name."""

    async def a_counted() -> dict[str, Any] | None:
        status = await _status(api, namespace=team_a, plural="swarms", name=slug)
        return status if (status.get("refusals") or {}).get("lastHour") == 1 else None

    a_swarm = await watching.eventually(
        a_counted, what="team A's Swarm refusals", operator=process, timeout=60
    )
    assert _condition(a_swarm, "Invalid") is None, a_swarm


def _check_the_records_are_team_a_s(redis_url: str, *, team_a: str, team_b: str, slug: str) -> None:
    """The record is A's (its owner claim names A's namespace and A's Execution), shown to A, and
    its name neither taken by B's admin nor given up by A's while A's records exist."""
    r: redis.Redis = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert r.get(f"{PREFIX}:{{{slug}}}:namespace") == team_a
        owner = json.loads(str(r.hget(f"{PREFIX}:{{{slug}}}:{store_.OWNERS}", EXECUTION)))
        assert owner["namespace"] == team_a
    finally:
        r.close()
    shown = _records(redis_url, "startup", slug, EXECUTION)
    assert shown.returncode == 0, shown.stderr
    assert "planted kind refusal" in shown.stdout

    # B's admin may not take the name while A's records exist; A's may not give it up either.
    refused = commands.records_release(slug=slug, namespace=team_b, redis_url=redis_url)
    assert refused.returncode == 1 and f"owned by namespace {team_a!r}" in refused.stderr
    held = commands.records_release(slug=slug, namespace=team_a, redis_url=redis_url)
    assert held.returncode == 1 and "still has records" in held.stderr


# With a refusal budget, a launch checks the slug before it reads the budget; without one, the
# slug is checked in the name's claim: B is told SlugInUse on either path.
@pytest.mark.parametrize(
    "budget", [{"maxRefusals": 1, "windowSeconds": 3600}, None], ids=["budget", "no-budget"]
)
async def test_two_namespaces_with_the_same_names_never_see_each_others_records(
    budget: dict[str, int] | None,
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    other_namespace: str,
    operator: OperatorFactory,
    redis_url: str,
) -> None:
    team_a, team_b = namespace, other_namespace
    # A name of this test's own: the operator serves every namespace, and an earlier test's
    # namespaces, still terminating, may hold a Swarm under the same name.
    slug = f"{SLUG}-{uuid.uuid4().hex[:6]}"
    # Before the operator runs: A's Execution and its worker Pod, refused at startup (Failed).
    await _create_swarm_and_execution(admin_api, namespace=team_a, slug=slug, budget=budget)
    await planting.plant_refused_worker(
        admin_api, control_plane, namespace=team_a, slug=slug, execution=EXECUTION
    )
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=None)
    await _execution_in_phase(
        admin_api, process, namespace=team_a, phase="Done", what="team A's Execution Done", timeout=90
    )

    # Team B, later, under the same names, with the same settings (a budget A's refusal tripped).
    await _create_swarm_and_execution(admin_api, namespace=team_b, slug=slug, budget=budget)
    b_status = await _execution_in_phase(
        admin_api, process, namespace=team_b, phase="Invalid", what="team B's Execution Invalid", timeout=60
    )
    invalid = _condition(b_status, "Invalid")
    assert invalid is not None and invalid["reason"] == "SlugInUse", b_status
    assert team_a in invalid["message"] and "records release" in invalid["message"]
    # Not A's name-in-use, nor A's budget: B is told about the name, and nothing of A's shows.
    assert "build-42 already has records" not in invalid["message"]
    await _check_team_b_swarm_told_nothing_of_a(admin_api, process, team_b=team_b, slug=slug)
    await _check_team_a_swarm_counted(admin_api, process, team_a=team_a, slug=slug)

    # No worker Pod of B's was created, and A's refused one is gone (captured first).
    for team in (team_a, team_b):
        left = await client.CoreV1Api(admin_api).list_namespaced_pod(team)
        assert [p.metadata.name for p in left.items] == [], team
    _check_the_records_are_team_a_s(redis_url, team_a=team_a, team_b=team_b, slug=slug)
