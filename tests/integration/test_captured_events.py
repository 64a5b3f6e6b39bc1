"""The Events a capture keeps, on the real API server and Redis: written by anyone allowed to
create Events, each says who wrote it, and one written to be large crowds none of the kubelet's
out of the capture."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.support.fixtures_rig import Rig
from tests.support.planting import SLUG, remove
from tests.support.pods import post_event

pytestmark = pytest.mark.integration

REAL = ("Scheduled", "Pulling", "Pulled", "Created", "BackOff")


async def stored_events(rig: Rig) -> list[dict[str, Any]]:
    raw = await rig.store.redis.hget(rig.store.key(SLUG, "attempt-startup-diagnostics"), "e1")
    assert raw is not None
    events: list[dict[str, Any]] = json.loads(raw)["startup"]["events"]
    return events


async def test_an_event_of_20_kib_among_five_real_ones_the_five_are_kept(rig: Rig) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    for reason in REAL:
        await post_event(rig.api, pod=pod, type_="Normal", reason=reason, message=f"{reason} worker")
    # Newest of all, by someone else than the kubelet, 20 KiB in its reason, type and message: the
    # API server takes it (a core/v1 Event's words have no length bound).
    await post_event(
        rig.api,
        pod=pod,
        type_="\x01" * 4096,
        reason="\x01" * 8192,
        message="\x01" * 8192,
        component="\x01" * 253,
    )
    async with rig.runtime() as runtime:
        removal = await remove(runtime, attempt, pod["metadata"]["uid"])
    assert removal.removed is True
    kept = await stored_events(rig)
    kubelets = {e["reason"]: e for e in kept if e.get("source") == {"component": "kubelet"}}
    assert set(REAL) <= set(kubelets)
    assert all(kubelets[r]["reporting_controller"] == "kubelet" for r in REAL)
    # Too large to keep even cut field by field (each escaped control character is six bytes), so
    # it alone is skipped.
    assert [e for e in kept if e["reason"].startswith("\x01")] == []


async def test_a_forged_event_keeps_its_writers_name(rig: Rig) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    await post_event(rig.api, pod=pod, type_="Warning", reason="Failed", message="real", component="kubelet")
    await post_event(
        rig.api, pod=pod, type_="Warning", reason="Failed", message="forged", component="mallory"
    )
    async with rig.runtime() as runtime:
        removal = await remove(runtime, attempt, pod["metadata"]["uid"])
    assert removal.removed is True
    by_message = {e["message"]: e for e in await stored_events(rig) if e["reason"] == "Failed"}
    assert (by_message["real"]["source"], by_message["real"]["reporting_controller"]) == (
        {"component": "kubelet"},
        "kubelet",
    )
    assert (by_message["forged"]["source"], by_message["forged"]["reporting_controller"]) == (
        {"component": "mallory"},
        "mallory",
    )
    listed = await client.CoreV1Api(rig.api).list_namespaced_event(rig.namespace)
    assert {i.source.component for i in listed.items if i.message in by_message} == {"kubelet", "mallory"}
