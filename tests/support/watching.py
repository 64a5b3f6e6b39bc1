"""What a test that watches the operator work reads and writes: Executions and Swarms (get,
create, merge patch), an Execution's status and the wait until it is Done, their Events, their
records in Redis, and :func:`eventually`, which polls until the operator has done something."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio
from kubernetes_asyncio import client

from agentihooks_swarm import store as store_
from tests.support import pods
from tests.support.operator_process import OperatorProcess

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    *,
    what: str,
    timeout: float = 30.0,
    operator: OperatorProcess | None = None,
) -> T:
    """Poll ``probe`` until it returns something other than None/False."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value is not None and value is not False:
            return value
        if operator is not None and not operator.running:
            raise AssertionError(f"the operator died while waiting for {what}:\n{operator.tail()}")
        if time.monotonic() > deadline:
            tail = f"\n{operator.tail()}" if operator is not None else ""
            raise TimeoutError(f"{what}: not within {timeout}s{tail}")
        await asyncio.sleep(0.1)


async def until(what: str, check: Callable[[], object], *, timeout: float = 20.0) -> None:
    """Poll ``check`` (no I/O: a table, a flag) until it holds, as :func:`eventually` polls a probe."""

    async def probe() -> bool:
        return bool(check())

    await eventually(probe, what=what, timeout=timeout)


async def execution(api: client.ApiClient, *, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = await client.CustomObjectsApi(api).get_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, "executions", name
    )
    return found


async def create(api: client.ApiClient, body: dict[str, Any]) -> None:
    plural = {"Swarm": "swarms", "Execution": "executions"}[body["kind"]]
    await client.CustomObjectsApi(api).create_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", body["metadata"]["namespace"], plural, body
    )


async def events_for(api: client.ApiClient, *, namespace: str, name: str) -> list[tuple[str, str, str]]:
    listed = await client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    )
    return [(e.type, e.reason, e.message) for e in listed.items]


async def events_once(
    api: client.ApiClient,
    *,
    namespace: str,
    name: str,
    reasons: set[str],
    operator: OperatorProcess | None = None,
    timeout: float = 30.0,
) -> list[tuple[str, str, str]]:
    """The object's Events once every one of ``reasons`` is among them: the operator posts a
    step's Events after that step's status, so an Execution seen Done may not have them yet."""

    async def posted() -> list[tuple[str, str, str]] | None:
        found = await events_for(api, namespace=namespace, name=name)
        return found if reasons <= {r for _, r, _ in found} else None

    return await eventually(
        posted, what=f"the Events {sorted(reasons)} of {name}", operator=operator, timeout=timeout
    )


pod_exists = pods.pod_exists


async def stored(
    redis_url: str, *, slug: str, name: str, execution: str, prefix: str = "agentihooks-swarm"
) -> Any:
    """The JSON record ``execution`` in hash ``name`` of swarm ``slug``, or None."""
    connection = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    try:
        raw = await connection.hget(store_.key(prefix, slug, name), execution)
    finally:
        await connection.aclose()
    return loads(raw)


def loads(raw: str | bytes | None) -> Any:
    return None if raw is None else json.loads(raw)


async def merge_patch(
    api: client.ApiClient,
    *,
    namespace: str,
    plural: str,
    name: str,
    body: dict[str, Any],
    status: bool = False,
) -> dict[str, Any]:
    """A JSON merge patch of a custom object, or of its status (kubernetes-asyncio sends a JSON
    patch by default)."""
    custom: Any = client.CustomObjectsApi(api)
    patch = custom.patch_namespaced_custom_object_status if status else custom.patch_namespaced_custom_object
    found: dict[str, Any] = await patch(
        "swarm.agentihooks.io",
        "v1alpha1",
        namespace,
        plural,
        name,
        body,
        _content_type="application/merge-patch+json",
    )
    return found


async def status_of(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = (await execution(api, namespace=namespace, name=name)).get("status") or {}
    return found


async def wait_done(
    api: client.ApiClient, namespace: str, name: str, process: OperatorProcess, timeout: float = 60.0
) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        status = await status_of(api, namespace, name)
        return status if status.get("phase") == "Done" else None

    return await eventually(done, what=f"{name} to be Done", operator=process, timeout=timeout)
