"""A launch reads its Swarm from the operator's watch of the Swarms (controller/swarm_watch.py), on
the real API server through the fault proxy, with the watch itself behind that proxy: a Swarm the
watch holds costs no request; one the watch has not seen (held behind while it believes itself
in sync) is read live, so it never looks missing; a Swarm's change reaches the next launch once
the watch brings it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentihooks_swarm.controller import executions, swarm_watch
from agentihooks_swarm.kubernetes import informer
from agentihooks_swarm.lifecycle import model, step
from tests.support import builders, watching
from tests.support.fixtures_rig import Rig
from tests.support.planting import SLUG
from tests.support.proxy import WATCH_QUERY

pytestmark = pytest.mark.integration


@dataclasses.dataclass
class Watching:
    steps: step.Lifecycle
    swarms: swarm_watch.Swarms
    runtime: model.Runtime


@contextlib.asynccontextmanager
async def watching_swarms(rig: Rig) -> AsyncIterator[Watching]:
    """The steps with the Swarms' watch, both through the proxy; the watch's requests end every
    second, so a rule on the next one takes effect at once."""
    async with rig.runtime() as runtime:
        swarms = swarm_watch.Swarms()
        watch = informer.Informer(
            name="swarms",
            sources=[runtime.cluster.swarms.listing(namespace=rig.namespace)],
            handler=swarms,
            watch_seconds=1,
            on_sync=swarms.synced,
        )
        task = asyncio.create_task(watch.run())
        try:
            await asyncio.wait_for(watch.ready.wait(), 20)
            yield Watching(
                steps=dataclasses.replace(rig.steps(runtime), swarms=swarms), swarms=swarms, runtime=runtime
            )
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _swarm_path(rig: Rig) -> str:
    return rf"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{rig.namespace}/swarms/{SLUG}"


def _reads(found: Watching, source: str) -> float:
    value = found.runtime.metrics.registry.get_sample_value(
        "agentihooks_swarm_launch_reads_total", {"object": "swarm", "source": source}
    )
    return value or 0.0


async def _launched(rig: Rig, found: Watching, name: str, *, project: str = "allowed") -> dict[str, Any]:
    """Execution ``name`` created and stepped once: its hand."""
    await watching.create(
        rig.api, builders.execution(name=name, namespace=rig.namespace, swarm=SLUG, project=project)
    )
    tracked = executions.track(await watching.execution(rig.api, namespace=rig.namespace, name=name))
    assert tracked is not None
    await found.steps.step(tracked)
    after = await watching.execution(rig.api, namespace=rig.namespace, name=name)
    assert not after["metadata"].get("finalizers")  # An Execution carries none of the operator's.
    hand: dict[str, Any] = after["status"]["hand"]
    return hand


async def test_a_watched_swarm_costs_no_request_and_its_change_reaches_the_next_launch(rig: Rig) -> None:
    await watching.create(rig.api, builders.swarm(name=SLUG, namespace=rig.namespace, projects=["other"]))
    async with watching_swarms(rig) as found:
        await watching.until(
            "the watch to hold the Swarm",
            lambda: found.swarms.swarm(namespace=rig.namespace, name=SLUG) is not None,
        )
        rig.proxy.reset_counts()
        refused = await _launched(rig, found, "first", project="allowed")
        assert (refused["handed"], refused["reason"]) == (False, "project_unpermitted")
        assert rig.proxy.count(method="GET", path=_swarm_path(rig)) == 0
        assert (_reads(found, "watch"), _reads(found, "live")) == (1.0, 0.0)

        await watching.merge_patch(
            rig.api,
            namespace=rig.namespace,
            plural="swarms",
            name=SLUG,
            body={"spec": {"registration": {"projects": ["other", "allowed"]}}},
        )

        def changed() -> bool:
            seen = found.swarms.swarm(namespace=rig.namespace, name=SLUG) or {}
            return "allowed" in seen.get("spec", {}).get("registration", {}).get("projects", [])

        await watching.until("the watch to bring the change", changed)
        handed = await _launched(rig, found, "second", project="allowed")
        assert handed["handed"] is True
        assert rig.proxy.count(method="GET", path=_swarm_path(rig)) == 0


async def test_a_swarm_the_lagging_watch_has_not_seen_is_read_live_and_launches(rig: Rig) -> None:
    async with watching_swarms(rig) as found:
        watches = rf"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{rig.namespace}/swarms"
        before = rig.proxy.count(method="GET", path=watches, query=WATCH_QUERY)
        held = rig.proxy.delay(seconds=30, method="GET", path=watches, query=WATCH_QUERY, times=None)
        await rig.proxy.wait_for_count(
            at_least=before + 1, timeout=10, method="GET", path=watches, query=WATCH_QUERY
        )
        await watching.create(rig.api, builders.swarm(name=SLUG, namespace=rig.namespace))
        rig.proxy.reset_counts()
        hand = await _launched(rig, found, "new")
        assert found.swarms.swarm(namespace=rig.namespace, name=SLUG) is None  # Still behind.
        rig.proxy.remove_rule(held)
    assert hand["handed"] is True
    assert rig.proxy.count(method="GET", path=_swarm_path(rig)) == 1
    assert (_reads(found, "watch"), _reads(found, "live")) == (0.0, 1.0)
