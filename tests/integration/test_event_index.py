"""The operator's index of the Pods' Events, on the real API server through the fault proxy: a
capture reads a Pod's Events from it without a list, falls back to the list while its watch is
refused, and a broken watch lists again and catches up (Events added, changed and deleted)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import records
from agentihooks_swarm.capture import diagnostics
from agentihooks_swarm.kubernetes import event_index
from agentihooks_swarm.lifecycle import model
from agentihooks_swarm.storage import operations
from tests.support.fixtures_rig import Rig
from tests.support.planting import SLUG, remove
from tests.support.proxy import WATCH_QUERY, FaultProxy, WatchError

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def indexed(rig: Rig) -> AsyncIterator[model.Runtime]:
    """A runtime through the proxy with a running Events index of the test's namespace (retrying
    quickly)."""
    async with rig.runtime() as runtime:
        index = event_index.EventIndex(namespaces=(rig.namespace,), metrics=runtime.metrics)
        watch = dataclasses.replace(
            event_index.informer(client=runtime.cluster.pods, index=index),
            retry_seconds=0.2,
            retry_cap_seconds=0.2,
        )
        task = asyncio.create_task(watch.run())
        try:
            yield dataclasses.replace(runtime, events=index)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def until(
    what: str, check: Callable[[], bool], *, seconds: float = 15.0, proxy: FaultProxy | None = None
) -> None:
    for _ in range(int(seconds / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    calls = [f"{c.method} {c.path}?{c.query}" for c in proxy.calls()[-10:]] if proxy is not None else []
    raise AssertionError(f"not within {seconds}s: {what}; the proxy's last calls: {calls}")


async def post_event(
    api: client.ApiClient, *, pod: dict[str, Any], reason: str, message: str, count: int = 1
) -> dict[str, Any]:
    metadata = pod["metadata"]
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    body: Any = {
        "metadata": {"generateName": f"{metadata['name']}.", "namespace": metadata["namespace"]},
        "involvedObject": {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata["uid"],
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "count": count,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": "test"},
    }
    response: Any = await client.CoreV1Api(api).create_namespaced_event(
        metadata["namespace"], body, _preload_content=False
    )
    created: dict[str, Any] = json.loads(await response.read())
    return created


def held(runtime: model.Runtime, pod: dict[str, Any]) -> list[dict[str, Any]] | None:
    assert runtime.events is not None
    return runtime.events.events(namespace=pod["metadata"]["namespace"], uid=pod["metadata"]["uid"])


def reasons(events: list[dict[str, Any]] | None) -> list[tuple[str, int]]:
    return sorted((str(e.get("reason")), int(e.get("count") or 1)) for e in events or [])


def uid_lists(proxy: FaultProxy, namespace: str) -> int:
    """Lists of one Pod's Events (what a capture makes without the index)."""
    return proxy.count(
        method="GET", path=f"/api/v1/namespaces/{namespace}/events", query="involvedObject.uid="
    )


async def stored_events(store: operations.AsyncStore) -> list[dict[str, Any]]:
    raw = await store.redis.hget(store.key(SLUG, "attempt-startup-diagnostics"), "e1")
    assert raw is not None
    events: list[dict[str, Any]] = json.loads(raw)["startup"]["events"]
    return events


def dumped(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [json.loads(records.dump(e)) for e in diagnostics.fit_events(raw)]


async def test_a_capture_reads_the_pods_events_from_the_index_without_a_list(rig: Rig) -> None:
    namespace = rig.namespace
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    async with indexed(rig) as runtime:
        await post_event(rig.api, pod=pod, reason="BackOff", message="Back-off restarting failed container")
        changed = await post_event(rig.api, pod=pod, reason="Failed", message="exit 78")
        await client.CoreV1Api(rig.api).patch_namespaced_event(
            changed["metadata"]["name"], namespace, {"count": 3}
        )
        await until(
            "the index holds both Events, one changed",
            lambda: {("BackOff", 1), ("Failed", 3)} <= set(reasons(held(runtime, pod))),
            proxy=rig.proxy,
        )
        expected = dumped(
            await runtime.cluster.pods.pod_events(namespace=namespace, uid=pod["metadata"]["uid"])
        )
        # Ours, and the scheduler's own (Scheduled).
        assert {("BackOff", 1), ("Failed", 3)} <= {(e["reason"], e["count"]) for e in expected}
        assert dumped(held(runtime, pod) or []) == expected
        rig.proxy.reset_counts()
        removal = await remove(runtime, attempt, pod["metadata"]["uid"])
        assert removal.removed is True
        reads = runtime.metrics.pod_events_reads
        assert (reads.labels(source="index")._value.get(), reads.labels(source="list")._value.get()) == (1, 0)
        assert runtime.metrics.event_index_synced._value.get() == 1
    # Stopped, the index is out of sync: nothing would read a table that no watch keeps.
    assert runtime.events is not None and runtime.events.events(namespace=namespace, uid="any") is None
    assert runtime.metrics.event_index_synced._value.get() == 0
    base = f"/api/v1/namespaces/{namespace}/pods/{attempt.pod_name}"
    calls = [(c.method, c.path) for c in rig.proxy.calls() if not WATCH_QUERY.search(c.query)]
    # No Events list; the last call releases the evidence finalizer.
    assert calls == [("GET", base), ("GET", base + "/log"), ("DELETE", base), ("PATCH", base)]
    assert await stored_events(rig.store) == expected


async def test_while_the_watch_is_refused_a_capture_lists_the_pods_events(rig: Rig) -> None:
    """A Role with list but not watch on events (the Role before the index): every capture lists."""
    path = f"/api/v1/namespaces/{rig.namespace}/events"
    rig.proxy.fail(status=403, method="GET", path=path, query=WATCH_QUERY, times=None)
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    await post_event(rig.api, pod=pod, reason="Failed", message="exit 78")
    async with indexed(rig) as runtime:
        await until(
            "the index listed and its watch was refused twice",
            lambda: rig.proxy.count(method="GET", path=path, query=WATCH_QUERY) >= 2,
        )
        assert held(runtime, pod) is None
        removal = await remove(runtime, attempt, pod["metadata"]["uid"])
        assert removal.removed is True
        reads = runtime.metrics.pod_events_reads
        assert (reads.labels(source="index")._value.get(), reads.labels(source="list")._value.get()) == (0, 1)
        assert runtime.metrics.event_index_synced._value.get() == 0
    assert uid_lists(rig.proxy, rig.namespace) == 1
    assert ("Failed", 1) in [(e["reason"], e["count"]) for e in await stored_events(rig.store)]


async def test_a_broken_watch_lists_again_and_follows_adds_changes_and_deletes(rig: Rig) -> None:
    namespace, admin_api = rig.namespace, rig.api
    path = f"/api/v1/namespaces/{namespace}/events"
    pod = await rig.plant(await rig.attempt(), exit_code=78)
    await post_event(admin_api, pod=pod, reason="Planted", message="before the index")
    # The first watch answers 410 Expired (as after a long disconnection): the index lists again.
    rig.proxy.add_rule(method="GET", path=path, query=WATCH_QUERY, action=WatchError(), times=1)
    async with indexed(rig) as runtime:
        await until("the index listed again after the 410", lambda: held(runtime, pod) is not None)
        lists = [c for c in rig.proxy.calls() if c.path == path and not WATCH_QUERY.search(c.query)]
        assert len(lists) == 2 and all("involvedObject.kind=Pod" in c.query for c in lists)
        before = reasons(held(runtime, pod))
        assert ("Planted", 1) in before
        added = await post_event(admin_api, pod=pod, reason="BackOff", message="after")
        await until("the added Event", lambda: ("BackOff", 1) in reasons(held(runtime, pod)))
        await client.CoreV1Api(admin_api).patch_namespaced_event(
            added["metadata"]["name"], namespace, {"count": 9}
        )
        await until("the changed count", lambda: ("BackOff", 9) in reasons(held(runtime, pod)))
        await client.CoreV1Api(admin_api).delete_namespaced_event(added["metadata"]["name"], namespace)
        await until("the deleted Event gone", lambda: reasons(held(runtime, pod)) == before)
        listed = await runtime.cluster.pods.pod_events(namespace=namespace, uid=pod["metadata"]["uid"])
        assert dumped(held(runtime, pod) or []) == dumped(listed)
        assert runtime.events is not None
        # In sync and nothing held about a Pod: it has no Events (no list needed).
        assert runtime.events.events(namespace=namespace, uid="5a0e2b53-0000-4000-8000-000000000000") == []
        assert (
            runtime.events.events(namespace="elsewhere", uid=pod["metadata"]["uid"]) is None
        )  # Not watched.
