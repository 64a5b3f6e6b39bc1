"""The reads a step spares with the operator's watch of its worker Pods (lifecycle/watched.py), on
the real API server through the fault proxy, with the watch itself behind that proxy:

* a refused launch adopts the Pod the watch saw (no create, no read before the spec's re-read),
  and its cleanup pins no Pod its launch removal removed (no list);
* the watch lagging while it believes itself in sync (its next watch request held back, so a
  Pod the launch made is not in it yet): the cleanup still pins, captures and removes that Pod;
* the watch listing again (after a 410 or a failed watch, its list held back): it answers
  nothing, and the step lists the Pods itself;
* a worker that has not started (a container waiting) is judged from the watch while it is within
  its startup deadline (no read), and read, and given its kubelet deadline, once past it;
* a handed worker that failed is judged and captured from the watch's copy of its terminal Pod
  (no read), and a copy the watch had not brought up to date is refused at the delete, read
  again, captured and deleted.

No Pod is missed and none is left behind in any of them."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.controller import executions, worker_pods
from agentihooks_swarm.kubernetes import informer, labels
from agentihooks_swarm.lifecycle import attempts, finals, model, watched
from tests.support import builders, cleanup_passes, pods, watching
from tests.support.fixtures_rig import Rig
from tests.support.planting import SLUG
from tests.support.proxy import WATCH_QUERY, Respond, WatchError
from tests.support.watching import until

pytestmark = pytest.mark.integration

#: The watch's own list of every worker Pod (by the execution label alone), not a step's list of
#: one attempt's Pods (whose selector names the execution).
WATCH_LIST = re.compile(r"labelSelector=swarm\.agentihooks\.io/execution-id(&|$)")


@dataclasses.dataclass
class Watched:
    runtime: model.Runtime
    table: worker_pods.WorkerPods
    watch: informer.Informer


@contextlib.asynccontextmanager
async def watched_runtime(rig: Rig, *, handed: bool = False) -> AsyncIterator[Watched]:
    """The operator's runtime with its worker Pods' watch, both through the proxy; the watch's
    requests end every second, so a rule on the next one takes effect at once. ``handed``: every
    worker counts as handed its grant (the table keeps its terminal Pod whole)."""
    async with rig.runtime() as runtime:
        table = worker_pods.WorkerPods(
            owners=lambda namespace, execution: (),
            wake=lambda uid: None,
            handed=(lambda namespace, execution: True) if handed else None,
        )
        watch = informer.Informer(
            name="worker pods",
            sources=[runtime.cluster.pods.worker_pods_listing(namespace=rig.namespace)],
            handler=table,
            watch_seconds=1,
            retry_seconds=0.2,
            retry_cap_seconds=0.4,
            on_sync=table.synced,
        )
        task = asyncio.create_task(watch.run())
        try:
            await asyncio.wait_for(watch.ready.wait(), 20)
            yield Watched(runtime=dataclasses.replace(runtime, workers=table), table=table, watch=watch)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _pods_path(rig: Rig) -> str:
    return rf"/api/v1/namespaces/{rig.namespace}/pods$"


def _execution_reads(rig: Rig, name: str) -> int:
    path = rf"/apis/swarm\.agentihooks\.io/v1alpha1/namespaces/{rig.namespace}/executions/{name}$"
    return sum(1 for c in rig.proxy.calls() if c.method == "GET" and re.match(path, c.path))


def _service_lists(rig: Rig) -> int:
    """The step's lists of one attempt's Services (its selector names the execution)."""
    path = rf"/api/v1/namespaces/{rig.namespace}/services$"
    return sum(
        1
        for c in rig.proxy.calls()
        if c.method == "GET" and re.match(path, c.path) and "execution-id=" in c.query
    )


def _attempt_lists(rig: Rig) -> int:
    """The step's lists of one attempt's Pods (its selector names the execution)."""
    return sum(
        1
        for c in rig.proxy.calls()
        if c.method == "GET" and re.match(_pods_path(rig), c.path) and "execution-id=" in c.query
    )


async def _cancel_and_clean_up(rig: Rig, steps: Any, name: str) -> dict[str, Any]:
    """Cancel Execution ``name`` and step it: its cleanup's retained record."""
    await watching.merge_patch(
        rig.api, namespace=rig.namespace, plural="executions", name=name, body={"spec": {"cancel": True}}
    )
    done = await steps.step(await rig.tracked(name))
    assert done.settled, done
    return await cleanup_passes.retained_of(rig.store, await rig.attempt(execution=name))


async def test_a_refused_launch_adopts_the_watched_pod_and_lists_nothing(rig: Rig) -> None:
    name = "refused"
    await watching.create(rig.api, builders.swarm(name=SLUG, namespace=rig.namespace))
    await watching.create(
        rig.api, builders.execution(name=name, namespace=rig.namespace, swarm=SLUG, project="elsewhere")
    )
    attempt = await rig.attempt(execution=name)
    planted = await rig.plant(attempt, exit_code=78, reason="Error")
    async with watched_runtime(rig) as found:
        await watching.until(
            "the watch to see the planted Pod",
            lambda: found.table.seen(namespace=rig.namespace, name=attempt.pod_name).pod is not None,
        )
        rig.proxy.reset_counts()
        done = await rig.steps(found.runtime).step(await rig.tracked(name))
    assert done.settled
    pod = f"/api/v1/namespaces/{rig.namespace}/pods/{attempt.pod_name}"
    asked = [(c.method, c.path) for c in rig.proxy.calls() if "/pods" in c.path and "watch=" not in c.query]
    # No create answering 409 and no read before the spec's re-read; no list of the attempt's Pods.
    assert asked == [("GET", pod), ("GET", pod + "/log"), ("DELETE", pod), ("PATCH", pod)], "\n".join(
        f"{c.method} {c.path} {c.query}" for c in rig.proxy.calls()
    )
    assert _attempt_lists(rig) == 0
    assert _service_lists(rig) == 0  # Its template has no terminal port: the hand says no Service.
    assert _execution_reads(rig, name) == 0  # Its small spec came with the watch's view of it.
    stored = await rig.startup(execution=name)
    assert stored is not None and stored.uid == planted["metadata"]["uid"]
    await rig.gone(attempt)
    retained = await cleanup_passes.retained_of(rig.store, attempt)
    assert retained["removed"]["pods"] == []  # Launch removal took it; its capture is the launch record.


async def test_a_large_spec_is_read_at_its_launch(rig: Rig) -> None:
    """A spec over the table's budget is not kept: the launch reads the Execution once, and
    launches from what it read."""
    name = "large"
    await watching.create(rig.api, builders.swarm(name=SLUG, namespace=rig.namespace))
    task = {"notes": "n" * executions.SPEC_KEPT}
    await watching.create(
        rig.api, builders.execution(name=name, namespace=rig.namespace, swarm=SLUG, task=task)
    )
    tracked = await rig.tracked(name)
    assert tracked.spec is None
    async with watched_runtime(rig) as found:
        rig.proxy.reset_counts()
        await rig.steps(found.runtime).step(tracked)
        assert _execution_reads(rig, name) == 1
    attempt = await rig.attempt(execution=name)
    grant = await client.CoreV1Api(rig.api).read_namespaced_config_map(
        labels.grant_name(execution=name, generation=attempt.generation), rig.namespace
    )
    assert task["notes"] in grant.data["grant.json"]


async def test_a_pod_the_lagging_watch_has_not_seen_is_pinned_captured_and_removed(rig: Rig) -> None:
    name = "lagging"
    await rig.running_execution(name)
    async with watched_runtime(rig) as found:
        before = rig.proxy.count(method="GET", path=_pods_path(rig), query=WATCH_QUERY)
        # Every later watch request waits 30 s upstream: the watch stays "in sync" but sees nothing.
        held = rig.proxy.delay(seconds=30, method="GET", path=_pods_path(rig), query=WATCH_QUERY, times=None)
        await rig.proxy.wait_for_count(
            at_least=before + 1, timeout=10, method="GET", path=_pods_path(rig), query=WATCH_QUERY
        )
        steps = rig.steps(found.runtime)
        worker = labels.worker_pod_name(execution=name, generation=1)
        await steps.step(await rig.tracked(name))  # The launch creates the worker.
        await pods.wait_for_phase(rig.api, namespace=rig.namespace, name=worker, phase="Running")
        assert found.watch.synced
        assert found.table.seen(namespace=rig.namespace, name=worker) == watched.Seen(known=True, pod=None)
        rig.proxy.reset_counts()
        retained = await _cancel_and_clean_up(rig, steps, name)
        assert found.table.seen(namespace=rig.namespace, name=worker).pod is None  # Still behind.
        rig.proxy.remove_rule(held)
    assert _attempt_lists(rig) == 0
    [removed] = retained["removed"]["pods"]
    assert (removed["name"], removed["outcome"]) == (worker, "deleted")
    await cleanup_passes.gone(rig.api, rig.namespace, worker)


@pytest.mark.parametrize("fault", ["410", "500"])
async def test_a_watch_listing_again_answers_nothing_and_the_step_lists_itself(rig: Rig, fault: str) -> None:
    name = f"relist-{fault}"
    await rig.running_execution(name)
    async with watched_runtime(rig) as found:
        steps = rig.steps(found.runtime)
        worker = labels.worker_pod_name(execution=name, generation=1)
        await steps.step(await rig.tracked(name))
        await pods.wait_for_phase(rig.api, namespace=rig.namespace, name=worker, phase="Running")
        await watching.until(
            "the watch to see the worker", lambda: found.table.seen(namespace=rig.namespace, name=worker).pod
        )
        # The next watch ends with a 410 or fails; the list after it never answers.
        action = WatchError() if fault == "410" else Respond(status=500)
        rig.proxy.add_rule(method="GET", path=_pods_path(rig), query=WATCH_QUERY, action=action, times=1)
        rig.proxy.hang(method="GET", path=_pods_path(rig), query=WATCH_LIST, times=None)
        await watching.until("the watch to list again", lambda: not found.watch.synced)
        assert found.table.seen(namespace=rig.namespace, name=worker) == watched.UNKNOWN
        rig.proxy.reset_counts()
        retained = await _cancel_and_clean_up(rig, steps, name)
        rig.proxy.clear_rules()
    assert _attempt_lists(rig) == 1
    [removed] = retained["removed"]["pods"]
    assert (removed["name"], removed["outcome"]) == (worker, "deleted")
    await cleanup_passes.gone(rig.api, rig.namespace, worker)


@pytest.mark.parametrize("terminal_port", [None, 7681], ids=["no-terminal", "terminal"])
async def test_cleanup_looks_for_services_only_where_the_launch_made_one(
    rig: Rig, terminal_port: int | None
) -> None:
    """The hand records whether the launch's template had a terminal port: without one, cleanup
    lists no Services; with one, the Service is pinned and removed, though the Swarm lost its port
    since (the launch's template decides, not today's)."""
    name = "terminal" if terminal_port else "plain"
    await rig.running_execution(name, terminal_port=terminal_port)
    async with watched_runtime(rig) as found:
        steps = rig.steps(found.runtime)
        worker = labels.worker_pod_name(execution=name, generation=1)
        await steps.step(await rig.tracked(name))
        await pods.wait_for_phase(rig.api, namespace=rig.namespace, name=worker, phase="Running")
        tracked = await rig.tracked(name)
        assert tracked.status["hand"]["terminal"] is (terminal_port is not None)
        core = client.CoreV1Api(rig.api)
        service = labels.terminal_name(execution=name, generation=1)
        if terminal_port:
            await core.read_namespaced_service(service, rig.namespace)  # The launch made it.
            await watching.merge_patch(  # The Swarm drops its port: the attempt still has a Service.
                rig.api,
                namespace=rig.namespace,
                plural="swarms",
                name=SLUG,
                body={"spec": {"worker": {"terminalPort": None}}},
            )
        rig.proxy.reset_counts()
        retained = await _cancel_and_clean_up(rig, steps, name)
    assert _service_lists(rig) == (1 if terminal_port else 0)
    # Deleted by cleanup, or by the garbage collector first (the Service is owned by the Pod).
    removed = [s["name"] for s in retained["removed"]["services"]]
    assert removed == ([service] if terminal_port else [])
    listed = await core.list_namespaced_service(rig.namespace)
    assert [s.metadata.name for s in listed.items if s.metadata.deletion_timestamp is None] == []
    await cleanup_passes.gone(rig.api, rig.namespace, worker)


def _pod_reads(rig: Rig, name: str) -> int:
    path = rf"/api/v1/namespaces/{rig.namespace}/pods/{name}$"
    return sum(1 for c in rig.proxy.calls() if c.method == "GET" and re.match(path, c.path))


async def test_a_worker_not_started_is_judged_from_the_watch_until_its_startup_deadline(rig: Rig) -> None:
    """Pending with its container waiting, within its deadline: a step reads nothing and waits (not
    parked, so the resync comes back); past the deadline the step reads the Pod live and sets the
    ``activeDeadlineSeconds`` that makes its kubelet fail it, as a step without the watch would."""
    name = "waiting"
    deadline = 8
    waits = pods.protocol_annotations(waiting_reason="ImagePullBackOff", waiting_message="back-off pulling")
    await watching.create(
        rig.api,
        builders.swarm(
            name=SLUG, namespace=rig.namespace, annotations=waits, startup_deadline_seconds=deadline
        ),
    )
    await watching.create(rig.api, builders.execution(name=name, namespace=rig.namespace, swarm=SLUG))
    worker = labels.worker_pod_name(execution=name, generation=1)

    def waiting() -> bool:
        pod = found.table.seen(namespace=rig.namespace, name=worker).pod
        return pod is not None and [c[1] for c in pod.digest[3]] == ["waiting"]

    async with watched_runtime(rig) as found:
        steps = rig.steps(found.runtime)
        await steps.step(await rig.tracked(name))  # The launch creates the worker.
        await watching.until("the watch to see the worker's container waiting", waiting)
        seen = found.table.seen(namespace=rig.namespace, name=worker).pod
        assert seen is not None and seen.deadline == str(deadline) and seen.created
        rig.proxy.reset_counts()
        early = await steps.step(await rig.tracked(name))
        assert not early.settled
        assert _pod_reads(rig, worker) == 0
        await watching.until(
            "the worker to be past its startup deadline",
            lambda: (
                not finals.within_deadline(
                    created=seen.created, annotation=seen.deadline, default=600, at=finals.now()
                )
            ),
            timeout=deadline + 10,
        )
        rig.proxy.reset_counts()
        late = await steps.step(await rig.tracked(name))
        assert not late.settled
        assert _pod_reads(rig, worker) == 1
        body = await client.CoreV1Api(rig.api).read_namespaced_pod(worker, rig.namespace)
        assert body.spec.active_deadline_seconds is not None
    tracked = await rig.tracked(name)
    assert tracked.status.get("reason") == attempts.STARTUP_DEADLINE, tracked.status


async def test_a_launch_does_not_hand_its_grant_to_a_pod_the_lagging_watch_still_shows_alive(
    rig: Rig,
) -> None:
    """An earlier pass made the attempt's Pod and had it deleted (its launch removal) but recorded
    neither; the watch, lagging, still shows the Pod alive. Adopted as watched, it would get its
    grant on its way out and its Execution would wait for a worker being stopped. The launch reads
    it live first: being deleted, it is released (nothing refused to capture) and made anew later."""
    name = "behind"
    await rig.running_execution(name)
    attempt = await rig.attempt(execution=name)
    old = await rig.plant(attempt, phase="Running")
    async with watched_runtime(rig) as found:
        await watching.until(
            "the watch to see the planted Pod",
            lambda: found.table.seen(namespace=rig.namespace, name=attempt.pod_name).pod is not None,
        )
        before = rig.proxy.count(method="GET", path=_pods_path(rig), query=WATCH_QUERY)
        rig.proxy.delay(seconds=30, method="GET", path=_pods_path(rig), query=WATCH_QUERY, times=None)
        await rig.proxy.wait_for_count(
            at_least=before + 1, timeout=10, method="GET", path=_pods_path(rig), query=WATCH_QUERY
        )
        await client.CoreV1Api(rig.api).delete_namespaced_pod(attempt.pod_name, rig.namespace)
        seen = found.table.seen(namespace=rig.namespace, name=attempt.pod_name).pod
        assert seen is not None and not seen.deleting  # The watch has not seen the delete.
        first = await rig.steps(found.runtime).step(await rig.tracked(name))
        assert first.retry_after is not None and not first.settled
        status = (await watching.execution(rig.api, namespace=rig.namespace, name=name))["status"]
        assert "hand" not in status, status  # No grant was handed to the Pod on its way out.
        await rig.gone(attempt)
        grant = labels.grant_name(execution=name, generation=attempt.generation)
        with pytest.raises(client.ApiException) as missing:
            await client.CoreV1Api(rig.api).read_namespaced_config_map(grant, rig.namespace)
        assert missing.value.status == 404
        steps = rig.steps(found.runtime)
        await steps.step(await rig.tracked(name))  # Made anew, and handed.
        after = await watching.execution(rig.api, namespace=rig.namespace, name=name)
        assert after["status"]["hand"]["handed"] is True
        assert after["status"]["hand"]["podUid"] != old["metadata"]["uid"]
        await _cancel_and_clean_up(rig, steps, name)


async def _failed_and_kept(rig: Rig, found: Watched, name: str) -> str:
    """Execution ``name`` launched, its worker failed (exit 1) and kept whole by the watch."""
    failing = pods.protocol_annotations(phase="Failed", run_for="1s", exit_code=1, reason="Error")
    await watching.create(rig.api, builders.swarm(name=SLUG, namespace=rig.namespace, annotations=failing))
    await watching.create(rig.api, builders.execution(name=name, namespace=rig.namespace, swarm=SLUG))
    worker = labels.worker_pod_name(execution=name, generation=1)
    await rig.steps(found.runtime).step(await rig.tracked(name))

    def kept() -> bool:
        pod = found.table.seen(namespace=rig.namespace, name=worker).pod
        return pod is not None and pod.terminal() is not None

    await until("the watch keeps the failed worker's Pod whole", kept)
    return worker


def _calls(rig: Rig, method: str, worker: str) -> int:
    path = rf"/api/v1/namespaces/{rig.namespace}/pods/{worker}$"
    return sum(1 for c in rig.proxy.calls() if c.method == method and re.match(path, c.path))


async def _captured(rig: Rig, name: str, worker: str) -> None:
    """Retained: the worker deleted, with the capture of its exit 1; and gone."""
    retained = await cleanup_passes.retained_of(rig.store, await rig.attempt(execution=name))
    [removed] = retained["removed"]["pods"]
    assert (removed["name"], removed["outcome"]) == (worker, "deleted")
    [container] = removed["startup"]["containers"]
    assert container["terminated"]["exitCode"] == 1
    await cleanup_passes.gone(rig.api, rig.namespace, worker)


async def test_a_handed_worker_that_failed_is_judged_and_captured_from_the_watch(rig: Rig) -> None:
    name = "failed"
    async with watched_runtime(rig, handed=True) as found:
        worker = await _failed_and_kept(rig, found, name)
        rig.proxy.reset_counts()
        done = await rig.steps(found.runtime).step(await rig.tracked(name))
        assert done.settled, done
        assert _calls(rig, "GET", worker) == 0  # Judged from the watch's copy.
        assert _calls(rig, "DELETE", worker) == 1
    await _captured(rig, name, worker)


async def test_a_terminal_copy_the_watch_has_not_brought_up_to_date_is_read_again_before_the_delete(
    rig: Rig,
) -> None:
    name = "stale"
    async with watched_runtime(rig, handed=True) as found:
        worker = await _failed_and_kept(rig, found, name)
        before = rig.proxy.count(method="GET", path=_pods_path(rig), query=WATCH_QUERY)
        held = rig.proxy.delay(seconds=30, method="GET", path=_pods_path(rig), query=WATCH_QUERY, times=None)
        await rig.proxy.wait_for_count(
            at_least=before + 1, timeout=10, method="GET", path=_pods_path(rig), query=WATCH_QUERY
        )
        # The Pod changes after the copy the watch keeps (a new resourceVersion it has not seen).
        await client.CoreV1Api(rig.api).patch_namespaced_pod(
            worker, rig.namespace, {"metadata": {"annotations": {"example.com/seen": "later"}}}
        )
        rig.proxy.reset_counts()
        done = await rig.steps(found.runtime).step(await rig.tracked(name))
        assert found.watch.synced
        rig.proxy.remove_rule(held)
        assert done.settled, done
        assert _calls(rig, "DELETE", worker) == 2  # The copy's version refused, then as read.
        assert _calls(rig, "GET", worker) == 1
    await _captured(rig, name, worker)
