"""Final attempt cleanup, one pass at a time, on the real API server (through the fault proxy)
and the real Redis: capture once, log_reads, every outcome, the retained move, the guard."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import errors, records
from agentihooks_swarm.controller import leadership
from agentihooks_swarm.kubernetes import labels, owners
from agentihooks_swarm.lifecycle import cleanup, events, model
from tests.support import pods
from tests.support.fixtures_rig import Rig
from tests.support.planting import PLANTED, SLUG
from tests.support.proxy import Delay
from tests.support.watching import until

pytestmark = pytest.mark.integration

#: The Role of a ServiceAccount that may remove a worker's Pod and Service but not read its log.
# patch: the release of a Pod's evidence finalizer.
NO_LOGS = [
    {"apiGroups": [""], "resources": ["pods", "services"], "verbs": ["get", "list", "delete", "patch"]}
]


async def test_failed_worker_is_captured_once_deleted_and_retained(rig: Rig) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78, reason="Error")
    notify = events.Collected()
    async with rig.runtime() as runtime:
        retained = await rig.cleanup(runtime, attempt, notify=notify)
    await rig.gone(attempt)
    assert rig.proxy.count(path=r".*/log$") == 1
    assert rig.proxy.count(method="DELETE") == 1
    assert await rig.journal(attempt) is None
    kept = await rig.retained(attempt)
    assert set(kept) == {"execution", "final", "watermark", "archived", "removed"}
    assert kept["final"]["state"] == "failed"
    [entry] = kept["removed"]["pods"]
    assert set(entry) == {"name", "uid", "outcome", "startup"}
    assert (entry["name"], entry["uid"], entry["outcome"]) == (
        attempt.pod_name,
        pod["metadata"]["uid"],
        "deleted",
    )
    [container] = entry["startup"]["containers"]
    assert container["terminated"]["exitCode"] == 78
    assert container["log"].endswith(PLANTED.decode())
    assert retained.removed.pods[0].outcome == "deleted"
    assert [e[1] for e in notify.items] == ["CleanupFinished"]


async def journal_creates(rig: Rig) -> int:
    """``HSETNX`` calls so far: the pin script creates a journal entry with one (nothing else a
    pass sends does)."""
    stats = await rig.store.redis.info("commandstats")
    return int(stats.get("cmdstat_hsetnx", {}).get("calls", 0))


async def test_a_pass_with_nothing_to_pin_writes_no_journal_entry_and_retains(rig: Rig) -> None:
    """The attempt's only Pod is gone already (its launch removal took it): there is nothing to
    resume, so no entry is written, and the retained record is stored at once."""
    attempt = await rig.attempt()
    notify = events.Collected()
    before = await journal_creates(rig)
    async with rig.runtime() as runtime:
        retained = await rig.cleanup(runtime, attempt, notify=notify)
    assert await journal_creates(rig) == before
    assert await rig.journal(attempt) is None
    assert retained.removed.pods == [] and (await rig.retained(attempt))["removed"]["pods"] == []
    assert [(e[1], e[2]) for e in notify.items] == [
        ("CleanupFinished", f"Attempt {attempt.generation} cleaned up (nothing left)")
    ]


async def pinned_pod(rig: Rig, attempt: model.Attempt) -> dict[str, Any]:
    """The one Pod ``attempt``'s cleanup journal pinned, as stored."""
    journal = await rig.journal(attempt)
    assert journal is not None
    [pinned] = journal["pinned"]["pods"]
    return dict(pinned)


async def test_forbidden_log_fails_twice_then_removes_with_exit_reasons_only(rig: Rig) -> None:
    """Real RBAC without pods/log: the spec's Configuration section, pass by pass."""
    attempt = await rig.attempt()
    await rig.plant(attempt, exit_code=78, reason="Error")
    kubeconfig = await rig.service_account(name="op", rules=NO_LOGS)
    notify = events.Collected()
    async with rig.runtime(kubeconfig=kubeconfig) as runtime:
        for expected in (1, 2):
            with pytest.raises(cleanup.PassFailed, match=f"log_reads {expected} of 3.*pods/log"):
                await rig.cleanup(runtime, attempt, notify=notify)
            pinned = await pinned_pod(rig, attempt)
            assert pinned["log_reads"] == expected
            assert "startup" not in pinned and "sent" not in pinned
            assert await rig.exists(attempt)
        await rig.cleanup(runtime, attempt, notify=notify)
        degraded = runtime.metrics.captures.labels(path="cleanup", result="degraded")._value.get()
    await rig.gone(attempt)
    [entry] = await rig.removed_pods(attempt)
    assert (entry["outcome"], entry["log_reads"]) == ("deleted", 3)
    [container] = entry["startup"]["containers"]
    assert set(container) == {"name", "terminated", "log_error"}  # No log; log_error says why.
    assert (container["log_error"]["cause"], container["log_error"]["status"]) == ("refused", 403)
    assert (container["terminated"]["exitCode"], container["terminated"]["reason"]) == (78, "Error")
    assert degraded == 1
    assert [e[1] for e in notify.items] == ["LogsLost", "CleanupFinished"]
    assert "logs lost, exit reasons kept" in notify.items[0][2]


@pytest.mark.parametrize("fault", ["429", "503", "timeout"])
async def test_a_log_read_that_may_pass_is_retried_uncounted_and_a_later_success_keeps_the_full_capture(
    rig: Rig, fault: str
) -> None:
    attempt = await rig.attempt()
    await rig.plant(attempt, exit_code=78)
    rig.fault(fault, path=r".*/log$", times=1)
    async with rig.runtime(timeout=1.0) as runtime:
        with pytest.raises(cleanup.PassFailed, match="log_reads 0 of 3; such failures count 10, 60, 300 s"):
            await rig.cleanup(runtime, attempt)
        pinned = await pinned_pod(rig, attempt)
        assert "log_reads" not in pinned and pinned["log_read_failed_at"]
        cause = "timeout" if fault == "timeout" else "unavailable"
        assert pinned["log_read_error"]["cause"] == cause
        await rig.cleanup(runtime, attempt)
    [entry] = await rig.removed_pods(attempt)
    assert "log_reads" not in entry  # Nothing counted: the capture is whole.
    assert entry["startup"]["containers"][0]["log"].endswith(PLANTED.decode())


def ago(seconds: float) -> str:
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


async def test_an_unreachable_node_counts_only_at_10_60_and_300_s_then_its_pod_goes(rig: Rig) -> None:
    """The API server answers 500 when it cannot reach the Pod's kubelet. The journal's first
    failure time is moved back by the test to stand for the minutes a real outage takes."""
    attempt = await rig.attempt()
    await rig.plant(attempt, exit_code=78)
    unreachable = 'Get "https://127.0.0.1:10250/containerLogs/ns/p/worker": net/http: TLS handshake timeout'
    rig.proxy.fail(status=500, reason="InternalError", message=unreachable, path=r".*/log$", times=None)

    async def since(seconds: float, *, reads: int | None) -> None:
        stored = await rig.store.read_journal(slug=SLUG, execution=attempt.execution)
        assert stored is not None
        stored.pinned.pods[0].log_read_failed_at = ago(seconds)
        stored.pinned.pods[0].log_reads = reads
        await rig.store.save_journal(slug=SLUG, journal=stored)

    async with rig.runtime() as runtime:
        with pytest.raises(cleanup.PassFailed, match=r"node_unreachable.*could not reach the Pod's kubelet"):
            await rig.cleanup(runtime, attempt)
        # Each first failure moved well clear of its bound (the journal keeps whole seconds).
        for moved, before, after in ((5, None, None), (15, None, 1), (50, 1, 1), (70, 1, 2), (290, 2, 2)):
            await since(moved, reads=before)
            with pytest.raises(cleanup.PassFailed, match=f"log_reads {after or 0} of 3"):
                await rig.cleanup(runtime, attempt)
            assert await rig.exists(attempt)
        await since(310, reads=2)
        await rig.cleanup(runtime, attempt)
    await rig.gone(attempt)
    [entry] = await rig.removed_pods(attempt)
    assert entry["log_reads"] == 3
    [container] = entry["startup"]["containers"]
    assert "log" not in container and container["log_error"]["cause"] == "node_unreachable"


async def test_a_restarted_pass_reuses_the_saved_capture(rig: Rig) -> None:
    attempt = await rig.attempt()
    await rig.plant(attempt, exit_code=78)
    rig.fault("500", method="DELETE", path=r".*/pods/.*", times=1)
    async with rig.runtime() as runtime:
        with pytest.raises(Exception, match="500"):
            await rig.cleanup(runtime, attempt)
        pinned = await pinned_pod(rig, attempt)
        assert pinned["sent"] is True
        assert pinned["startup"]["containers"][0]["log"].endswith(PLANTED.decode())
        await rig.cleanup(runtime, attempt)
    assert rig.proxy.count(path=r".*/log$") == 1
    [entry] = await rig.removed_pods(attempt)
    assert entry["outcome"] == "deleted" and "log_reads" not in entry


async def test_outcomes_absent_replaced_unselected_and_services(rig: Rig) -> None:
    core = client.CoreV1Api(rig.api)
    absent, replaced, unselected = [
        await rig.attempt(execution=e) for e in ("absent", "replaced", "unselected")
    ]
    planted = {
        a.execution: await rig.plant(a, phase="Running", log=None) for a in (absent, replaced, unselected)
    }
    owner = planted["unselected"]["metadata"]
    await core.create_namespaced_service(
        rig.namespace,
        cast(
            Any,
            {
                "metadata": {
                    "name": "swarm-terminal-unselected-1",
                    "labels": unselected.labels,
                    # As the hand makes it: owned by its Pod.
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Pod", "name": owner["name"], "uid": owner["uid"]}
                    ],
                },
                "spec": {"selector": unselected.labels, "ports": [{"port": 7681}]},
            },
        ),
    )
    async with rig.runtime() as runtime:
        pinned: dict[str, records.Journal] = {}
        for a in (absent, replaced, unselected):
            entry = await cleanup.pin(runtime=runtime, store=rig.store, guard=model.Unguarded(), attempt=a)
            assert isinstance(entry, records.Journal)
            pinned[a.execution] = entry
        assert [p.name for p in pinned["unselected"].pinned.services] == ["swarm-terminal-unselected-1"]
        for attempt in (absent, replaced):
            await pods.force_delete(rig.api, namespace=rig.namespace, name=attempt.pod_name)
        await rig.plant(replaced, phase="Running", log=None)
        await core.patch_namespaced_pod(
            unselected.pod_name, rig.namespace, {"metadata": {"labels": {labels.EXECUTION: "someone-else"}}}
        )
        # Objects created after pinning are not added.
        await core.create_namespaced_pod(
            rig.namespace,
            cast(Any, pods.worker_pod(name="late-comer", namespace=rig.namespace, labels=absent.labels)),
        )
        rig.proxy.reset_counts()
        for attempt in (absent, replaced, unselected):
            await rig.cleanup(runtime, attempt)
    outcomes = {a.execution: (await rig.retained(a))["removed"] for a in (absent, replaced, unselected)}
    assert [p["outcome"] for p in outcomes["absent"]["pods"]] == ["absent"]
    # The Service still has the attempt's labels (its Pod was relabelled): deleted.
    assert [(s["name"], s["outcome"]) for s in outcomes["unselected"]["services"]] == [
        ("swarm-terminal-unselected-1", "deleted")
    ]
    assert [p["outcome"] for p in outcomes["replaced"]["pods"]] == ["replaced"]
    assert [p["outcome"] for p in outcomes["unselected"]["pods"]] == ["unselected"]
    assert [c.path for c in rig.proxy.calls() if c.method == "DELETE"] == [
        f"/api/v1/namespaces/{rig.namespace}/services/swarm-terminal-unselected-1"
    ]
    assert await rig.exists(replaced)
    assert await rig.exists(unselected)
    assert await pods.pod_exists(rig.api, namespace=rig.namespace, name="late-comer")


async def test_delete_that_reached_the_server_is_released_not_sent_again_on_the_next_pass(rig: Rig) -> None:
    attempt = await rig.attempt()
    await rig.plant(attempt, phase="Running", log=None)
    # The delete reaches the API server; its answer comes after the client gave up.
    rig.proxy.delay(seconds=3, method="DELETE", path=r".*/pods/.*", times=1, after_forward=True)
    async with rig.runtime(timeout=1.0) as runtime:
        with pytest.raises(TimeoutError):
            await rig.cleanup(runtime, attempt)
        # Deleted, and held by its evidence finalizer, which the lost answer left in place.
        assert await rig.exists(attempt)
        await rig.cleanup(runtime, attempt)
    await rig.gone(attempt)
    [entry] = await rig.removed_pods(attempt)
    # The next pass finds its own delete under way (sent), releases the Pod and never deletes twice.
    assert entry["outcome"] == "deleted"
    assert rig.proxy.count(method="DELETE") == 1
    assert rig.proxy.count(method="PATCH") == 1


async def test_a_refused_pod_someone_else_deletes_is_captured_waited_for_quietly_and_never_deleted_again(
    rig: Rig,
) -> None:
    """Launch removal's own delete looks the same to cleanup: a Pod with a deletionTimestamp whose
    delete this cleanup never sent. A finalizer holds it here for as long as the test needs."""
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    core = client.CoreV1Api(rig.api)
    await core.patch_namespaced_pod(
        attempt.pod_name, rig.namespace, {"metadata": {"finalizers": ["test/hold"]}}
    )
    await core.delete_namespaced_pod(attempt.pod_name, rig.namespace, grace_period_seconds=30)
    rig.proxy.reset_counts()
    try:
        async with rig.runtime() as runtime:
            with pytest.raises(cleanup.Terminating, match="being deleted, not by this cleanup") as waiting:
                await rig.cleanup(runtime, attempt)
            assert not waiting.value.overdue
            pinned = await pinned_pod(rig, attempt)
            assert pinned["uid"] == pod["metadata"]["uid"] and not pinned.get("sent")
            assert pinned["startup"]["containers"][0]["log"].endswith(PLANTED.decode())
            await core.patch_namespaced_pod(
                attempt.pod_name, rig.namespace, {"metadata": {"finalizers": None}}
            )
            await rig.gone(attempt)
            await rig.cleanup(runtime, attempt)
    finally:
        with contextlib.suppress(client.ApiException):
            await core.patch_namespaced_pod(
                attempt.pod_name, rig.namespace, {"metadata": {"finalizers": None}}
            )
    assert rig.proxy.count(method="DELETE") == 0
    assert rig.proxy.count(path=r".*/log$") == 1
    [entry] = await rig.removed_pods(attempt)
    assert entry["outcome"] == "absent"
    assert entry["startup"]["containers"][0]["terminated"]["exitCode"] == 78


class LosesLeadership:
    """A guard that stops holding the lease before the named step, as a replica would."""

    def __init__(self, *, before: str) -> None:
        self.before = before
        self.lost = False

    def check(self, *, before: str) -> None:
        if self.lost or before.startswith(self.before):
            self.lost = True
            raise leadership.NotLeader(f"lost the lease before {before}")


@pytest.mark.parametrize("step", ["deleting pod", "saving the capture", "moving the journal"])
async def test_a_replica_that_loses_the_lease_stops_before_its_next_write_or_delete(
    rig: Rig, step: str
) -> None:
    guard = LosesLeadership(before=step)
    attempt = await rig.attempt()
    await rig.plant(attempt, exit_code=78)
    async with rig.runtime() as runtime:
        with pytest.raises(leadership.NotLeader):
            await rig.cleanup(runtime, attempt, guard=guard)
        if step != "moving the journal":
            assert rig.proxy.count(method="DELETE") == 0
            assert await rig.exists(attempt)
        assert await rig.store.redis.hget(rig.store.key(SLUG, "attempt-retained"), attempt.execution) is None
        await rig.cleanup(runtime, attempt)  # The new leader finishes the same journal.
    assert rig.proxy.count(method="DELETE") == 1
    assert rig.proxy.count(path=r".*/log$") == (2 if step == "saving the capture" else 1)
    [entry] = await rig.removed_pods(attempt)
    assert entry["outcome"] == "deleted"


async def test_a_look_alike_beside_the_worker_is_neither_captured_nor_deleted(rig: Rig) -> None:
    """Labels are anyone's to write: a Pod with the attempt's labels that its Execution does not own
    is left alone (no log read, no delete, not pinned), and cleanup says so."""
    attempt = await rig.attempt()
    await rig.plant(attempt, exit_code=78, reason="Error")
    impostor: Any = pods.worker_pod(
        name="impostor", namespace=rig.namespace, labels=attempt.labels, phase="Failed", exit_code=78
    )
    await client.CoreV1Api(rig.api).create_namespaced_pod(rig.namespace, impostor)
    await pods.wait_for_phase(rig.api, namespace=rig.namespace, name="impostor", phase="Failed")
    notify = events.Collected()
    async with rig.runtime() as runtime:
        retained = await rig.cleanup(runtime, attempt, notify=notify)
        looked = runtime.metrics.look_alike_pods.labels(path="cleanup")._value.get()
    assert [p.name for p in retained.removed.pods] == [attempt.pod_name]
    assert rig.proxy.count(path=r".*/pods/impostor.*") == 0  # Never read, never deleted.
    assert await pods.pod_exists(rig.api, namespace=rig.namespace, name="impostor")
    [(kind, _, message)] = [n for n in notify.items if n[1] == "LookAlikePod"]
    assert kind == "Warning" and "impostor" in message and attempt.owner_uid in message
    assert looked == 1


async def test_a_release_as_judged_is_refused_once_the_pod_changed_since_its_read(rig: Rig) -> None:
    """Someone else deletes a worker; cleanup judged it by a read (running: nothing to capture);
    the worker failed after that read. The release names the version it judged, so the API server
    refuses it and the Pod stays held, to be read and judged again, instead of going uncaptured."""
    attempt = await rig.attempt()
    await rig.plant(attempt, phase="Running", log=None)
    core = client.CoreV1Api(rig.api)
    async with rig.runtime() as runtime:
        client_ = runtime.cluster.pods
        judged = await client_.read(namespace=rig.namespace, name=attempt.pod_name)
        assert judged is not None
        uid = judged["metadata"]["uid"]
        await core.patch_namespaced_pod(
            attempt.pod_name, rig.namespace, {"metadata": {"annotations": {"test/changed": "after the read"}}}
        )
        with pytest.raises(errors.PreconditionFailed, match="changed since it was judged"):
            await client_.release(
                namespace=rig.namespace, name=attempt.pod_name, uid=uid, found=judged, as_judged=True
            )
        again = await client_.read(namespace=rig.namespace, name=attempt.pod_name)
        assert again is not None and owners.EVIDENCE_FINALIZER in again["metadata"]["finalizers"]
        await client_.release(
            namespace=rig.namespace, name=attempt.pod_name, uid=uid, found=again, as_judged=True
        )
    released = await core.read_namespaced_pod(attempt.pod_name, rig.namespace)
    assert owners.EVIDENCE_FINALIZER not in (released.metadata.finalizers or [])


async def test_a_pod_someone_else_deletes_that_fails_before_its_release_is_captured_before_it_goes(
    rig: Rig,
) -> None:
    """Cleanup reads a Pod someone else deletes: running, nothing to capture. Its release is held
    back by the proxy until the worker has failed; the API server refuses that release (it names
    the version that was judged), and the pass reads the Pod again, captures it and then lets it go."""
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, phase="Running")
    core = client.CoreV1Api(rig.api)
    await core.delete_namespaced_pod(attempt.pod_name, rig.namespace, grace_period_seconds=30)
    held = rig.proxy.add_rule(
        method="PATCH", path=f".*/pods/{attempt.pod_name}", action=Delay(seconds=2.0), times=1
    )
    async with rig.runtime(timeout=10.0) as runtime:
        first = asyncio.create_task(rig.cleanup(runtime, attempt))
        await until("the release sent (and held back)", lambda: held.hits or first.done())
        # The release is on its way, for the version the pass judged (running): now the worker fails.
        await core.patch_namespaced_pod_status(
            attempt.pod_name,
            rig.namespace,
            {"status": _failed(pod, exit_code=1)},
        )
        with pytest.raises(cleanup.Terminating):
            await first
        await rig.gone(attempt)
        await rig.cleanup(runtime, attempt)
    [entry] = await rig.removed_pods(attempt)
    assert (entry["uid"], entry["outcome"]) == (pod["metadata"]["uid"], "absent")
    [container] = entry["startup"]["containers"]
    assert container["terminated"]["exitCode"] == 1
    assert rig.proxy.count(method="DELETE") == 0
    # The release judged running was refused; the one after the capture went through.
    assert rig.proxy.count(method="PATCH", path=f".*/pods/{attempt.pod_name}") == 2


def _failed(pod: dict[str, Any], *, exit_code: int) -> dict[str, Any]:
    """``pod``'s status once its worker container has exited ``exit_code`` (as a kubelet writes it)."""
    status = dict(pod["status"])
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status["phase"] = "Failed"
    status["containerStatuses"] = [
        {
            **c,
            "ready": False,
            "started": False,
            "state": {
                "terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": now, "finishedAt": now}
            },
        }
        for c in status.get("containerStatuses") or []
    ]
    return status
