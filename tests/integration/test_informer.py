"""The one list-and-watch (kubernetes/informer.py), on the real API server through the fault
proxy: it lists, then follows the watch; a 410 (as an answer or as an ERROR event), a failed or
refused list, a broken or unreadable watch each make it list again (after a backoff for the
failures), and its handler ends up holding exactly what exists."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import clients, custom, informer
from tests.support import builders, namespaces, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_cluster import api_client
from tests.support.proxy import WATCH_QUERY, Cut, FaultProxy, Respond, WatchError

PLURAL = "executions"


@dataclasses.dataclass
class Recorder:
    """A handler that holds the objects by name, as the operator's tables hold theirs."""

    held: dict[str, str] = dataclasses.field(default_factory=dict)
    lists: int = 0
    listing: set[str] | None = None

    def begin(self) -> None:
        self.lists += 1
        self.listing = set()

    def apply(self, kind: str | None, body: Mapping[str, Any]) -> None:
        name = str(body["metadata"]["name"])
        if kind == "DELETED":
            self.held.pop(name, None)
            return
        if kind is None and self.listing is not None:
            self.listing.add(name)
        self.held[name] = str((body.get("spec") or {}).get("project"))

    def end(self) -> None:
        for name in set(self.held) - (self.listing or set()):
            del self.held[name]
        self.listing = None

    def needs_relist(self) -> bool:
        return False


@contextlib.asynccontextmanager
async def following(
    kubeconfig: Path, *namespaces: str, watch_seconds: int = 30
) -> AsyncIterator[tuple[informer.Informer, Recorder]]:
    """An informer of the Executions of ``namespaces`` (one source each), running for the block."""
    recorder = Recorder()
    async with api_client(kubeconfig=kubeconfig) as api:
        executions = custom.CustomClient(
            transport=clients.build(api=api, timeout=3.0).transport, plural=PLURAL
        )
        watch = informer.Informer(
            name="executions",
            sources=[executions.listing(namespace=namespace) for namespace in namespaces],
            handler=recorder,
            page=2,  # Several pages for a handful of objects.
            watch_seconds=watch_seconds,
            retry_seconds=0.2,
            retry_cap_seconds=0.4,
        )
        task = asyncio.create_task(watch.run())
        try:
            yield watch, recorder
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert not watch.synced  # Cancelled: out of sync.


async def until(what: str, check: Callable[[], bool], *, seconds: float = 20.0, state: object = None) -> None:
    for _ in range(int(seconds / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {seconds}s: {what} ({state})")


async def create(api: client.ApiClient, namespace: str, name: str, project: str = "p") -> None:
    body = builders.execution(name=name, namespace=namespace, swarm="s", project=project)
    await client.CustomObjectsApi(api).create_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, PLURAL, body
    )


async def delete(api: client.ApiClient, namespace: str, name: str) -> None:
    await client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, PLURAL, name
    )


async def change(api: client.ApiClient, namespace: str, name: str, project: str) -> None:
    await watching.merge_patch(
        api, namespace=namespace, plural=PLURAL, name=name, body={"spec": {"project": project}}
    )


def path(namespace: str) -> str:
    return f"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{namespace}/{PLURAL}"


async def test_lists_in_pages_then_follows_the_watch(
    admin_api: client.ApiClient,
    namespace: str,
    swarm_crds: list[str],
    proxy_kubeconfig: Path,
    fault_proxy: FaultProxy,
) -> None:
    for i in range(5):
        await create(admin_api, namespace, f"e{i}")
    async with following(proxy_kubeconfig, namespace) as (watch, recorder):
        await until("listed and watching", lambda: watch.synced and watch.ready.is_set())
        assert sorted(recorder.held) == [f"e{i}" for i in range(5)] and recorder.lists == 1
        assert fault_proxy.count(method="GET", path=path(namespace), query="limit=2") == 3  # 5 in pages of 2
        await create(admin_api, namespace, "late")
        await change(admin_api, namespace, "e0", "changed")
        await delete(admin_api, namespace, "e1")
        await until("the watch's changes", lambda: "late" in recorder.held and "e1" not in recorder.held)
        assert recorder.held["e0"] == "changed" and recorder.lists == 1


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(WatchError(), id="410-error-event"),
        pytest.param(Respond(status=410, reason="Gone"), id="410-answer"),
        pytest.param(Respond(status=500), id="500"),
        pytest.param(Respond(status=200, body=b"{not json\n"), id="unreadable"),
        pytest.param("reset", id="reset"),
        pytest.param(Cut(after_bytes=0), id="dropped-mid-answer"),
    ],
)
async def test_a_broken_watch_lists_again_and_catches_up(
    admin_api: client.ApiClient,
    namespace: str,
    swarm_crds: list[str],
    proxy_kubeconfig: Path,
    fault_proxy: FaultProxy,
    fault: Any,
) -> None:
    await create(admin_api, namespace, "kept")
    await create(admin_api, namespace, "removed")
    # Watch requests of 1 s: the API server ends each, and the next one meets the fault.
    async with following(proxy_kubeconfig, namespace, watch_seconds=1) as (watch, recorder):
        await until("in sync", lambda: watch.synced)
        if fault in ("reset", "reset-after-forward"):
            after = fault == "reset-after-forward"
            fault_proxy.reset(
                method="GET", path=path(namespace), query=WATCH_QUERY, times=1, after_forward=after
            )
        else:
            fault_proxy.add_rule(method="GET", path=path(namespace), query=WATCH_QUERY, action=fault, times=1)
        await until("the fault met", lambda: all(rule.exhausted for rule in fault_proxy.rules()))
        await create(admin_api, namespace, "added")
        await delete(admin_api, namespace, "removed")
        await until(
            "caught up after a new list",
            lambda: watch.synced and set(recorder.held) == {"kept", "added"},
            state=recorder,
        )
        # A connection reset before the answer is sent again by the HTTP client (the request is a
        # GET); every other fault ends the watch, and only a new list can prove it caught up.
        assert recorder.lists >= (1 if fault == "reset" else 2)


async def test_a_failing_list_is_retried_with_a_backoff_and_the_informer_is_out_of_sync(
    admin_api: client.ApiClient,
    namespace: str,
    swarm_crds: list[str],
    proxy_kubeconfig: Path,
    fault_proxy: FaultProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await create(admin_api, namespace, "e")
    fault_proxy.fail(status=503, method="GET", path=path(namespace), query="limit=", times=3)
    async with following(proxy_kubeconfig, namespace) as (watch, recorder):
        await asyncio.sleep(0.3)
        assert not watch.synced and not watch.ready.is_set() and recorder.held == {}
        await until("listed after the failures", lambda: watch.synced and "e" in recorder.held)
    lists = [c for c in fault_proxy.calls() if c.path == path(namespace) and not WATCH_QUERY.search(c.query)]
    assert len(lists) == 4
    warnings = [r for r in caplog.records if "out of sync" in r.getMessage()]
    assert warnings and warnings[0].levelname == "WARNING"  # Then info, until it is in sync again.
    assert all(r.levelname == "INFO" for r in warnings[1:])


async def test_several_namespaces_are_listed_as_one_and_each_watched_on_its_own(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    swarm_crds: list[str],
    proxy_kubeconfig: Path,
    fault_proxy: FaultProxy,
) -> None:
    with namespaces.made(control_plane, "second") as [other]:
        await create(admin_api, namespace, "a1")
        await create(admin_api, other, "b1")
        # The second namespace's first lists fail: the informer is out of sync as a whole.
        fault_proxy.fail(status=503, method="GET", path=path(other), query="limit=", times=2)
        async with following(proxy_kubeconfig, namespace, other, watch_seconds=1) as (watch, recorder):
            await asyncio.sleep(0.3)
            assert not watch.synced and not watch.ready.is_set()
            await until(
                "both listed and watched", lambda: watch.synced and set(recorder.held) == {"a1", "b1"}
            )
            lists = recorder.lists
            # One namespace's watch meets a 410: both are listed again, and each watch goes on.
            fault_proxy.add_rule(
                method="GET", path=path(other), query=WATCH_QUERY, action=WatchError(), times=1
            )
            await until("the fault met", lambda: all(rule.exhausted for rule in fault_proxy.rules()))
            await create(admin_api, namespace, "a2")
            await delete(admin_api, other, "b1")
            await create(admin_api, other, "b2")
            await until(
                "caught up in both",
                lambda: watch.synced and set(recorder.held) == {"a1", "a2", "b2"},
                state=recorder,
            )
            assert recorder.lists > lists
    # Every list and watch named one of the two namespaces: never the whole cluster.
    asked = {call.path for call in fault_proxy.calls() if call.path.endswith(f"/{PLURAL}")}
    assert asked == {path(namespace), path(other)}
