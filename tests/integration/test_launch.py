"""Launch, the hand and launch removal, against the real API server (through the fault proxy)
and the real Redis. Every branch of the spec's "Launch removal" and each hand reason."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import errors, records, resources
from agentihooks_swarm.controller import leadership
from agentihooks_swarm.kubernetes import labels, owners
from agentihooks_swarm.lifecycle import cleanup, events, launch, model
from tests.support import pods
from tests.support.cleanup_passes import gone
from tests.support.fixtures_rig import Rig
from tests.support.planting import PLANTED, SLUG
from tests.support.proxy import Respond

pytestmark = pytest.mark.integration

#: The capture's fields next to the spec's (issue 12), each present only when there is something.
ADDITIVE = {"waiting", "conditions", "events", "events_error", "class", "fingerprint", "fingerprint_text"}


def swarm_spec(
    *, projects: tuple[str, ...] = ("allowed",), terminal_port: int | None = None
) -> resources.SwarmSpec:
    worker: dict[str, Any] = {"image": pods.WORKER_IMAGE}
    if terminal_port is not None:
        worker["terminalPort"] = terminal_port
    return resources.parse_swarm(
        name=SLUG, spec={"registration": {"projects": list(projects)}, "worker": worker}
    )


async def launch_e1(
    runtime: model.Runtime,
    attempt: model.Attempt,
    *,
    project: str = "allowed",
    terminal_port: int | None = None,
    notify: events.Collected | None = None,
    **spec: Any,
) -> launch.Launched:
    """Launch ``attempt`` of Execution ``e1`` (of the ``proof`` Swarm) for ``project``."""
    return await launch.launch(
        runtime=runtime,
        attempt=attempt,
        swarm=swarm_spec(terminal_port=terminal_port),
        execution=resources.parse_execution(name="e1", spec={"swarm": SLUG, "project": project, **spec}),
        notify=notify or events.Collected(),
    )


# --- what counts as refused ------------------------------------------------------------------------


@pytest.mark.smoke  # make check's one integration test: a launch removal, capture then delete
async def test_refused_pod_is_captured_stored_and_deleted_with_minimal_calls(rig: Rig) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78, reason="Error")
    notify = events.Collected()
    rig.proxy.reset_counts()
    async with rig.runtime() as runtime:
        removal = await launch.remove_at_launch(
            runtime=runtime, attempt=attempt, uid=pod["metadata"]["uid"], notify=notify
        )
    assert removal.removed is True
    calls = [(c.method, c.path) for c in rig.proxy.calls()]
    base = f"/api/v1/namespaces/{rig.namespace}/pods/{attempt.pod_name}"
    # The spec's calls, and (additive) one list of the Pod's own Events for the capture.
    assert calls == [
        ("GET", base),
        ("GET", base + "/log"),
        ("GET", f"/api/v1/namespaces/{rig.namespace}/events"),
        ("DELETE", base),
        ("PATCH", base),  # Additive: the evidence finalizer's release, its evidence stored.
    ]
    await gone(rig.api, rig.namespace, attempt.pod_name)

    raw = await rig.store.redis.hget(rig.store.key(SLUG, "attempt-startup-diagnostics"), "e1")
    assert raw is not None
    record = json.loads(raw)
    assert set(record) == {"pod", "uid", "labels", "startup"}
    assert record["pod"] == attempt.pod_name
    assert record["uid"] == pod["metadata"]["uid"]
    assert record["labels"] == attempt.labels
    # The spec's fields exactly, next to the additive evidence (no waiting container here).
    assert set(record["startup"]) - ADDITIVE == {"phase", "reason", "containers"}
    assert {"conditions", "class"} <= set(record["startup"]) and "waiting" not in record["startup"]
    assert record["startup"]["class"] == "exit_code"
    assert record["startup"]["phase"] == "Failed"
    [container] = record["startup"]["containers"]
    assert set(container) == {"name", "terminated", "log"}
    assert container["name"] == "worker"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert container["terminated"] == terminated  # The full state, every field as on the wire.
    assert terminated["exitCode"] == 78 and terminated["reason"] == "Error"
    assert {"startedAt", "finishedAt"} <= set(terminated)
    assert container["log"].endswith("Z worker startup refused: planted kind refusal\n")
    assert [e[1] for e in notify.items] == ["StartupRefused"]
    assert "class exit_code: container worker exited 78 (Error): " in notify.items[0][2]
    assert "planted kind refusal" in notify.items[0][2]


async def test_init_container_failure_is_refused(rig: Rig) -> None:
    attempt = await rig.attempt()
    await rig.plant_log(attempt, container="init", content=b"init: cannot fetch credentials\n")
    pod = await rig.plant(attempt, phase=None, log=None, init_exit_code=3, message="init refused")
    assert (await rig.remove(attempt, pod)).removed is True
    record = await rig.startup()
    assert record is not None
    assert record.startup.phase == "Failed"
    assert [c.name for c in record.startup.containers] == ["init"]
    assert record.startup.containers[0].terminated["exitCode"] == 3
    assert record.startup.containers[0].terminated["message"] == "init refused"
    assert record.startup.containers[0].log is not None
    assert record.startup.containers[0].log.endswith("init: cannot fetch credentials\n")


@pytest.mark.parametrize("phase", ["Running", "Succeeded"])
async def test_not_refused_is_deleted_without_a_record(rig: Rig, phase: str) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, phase=phase, log=None)
    rig.proxy.reset_counts()
    assert (await rig.remove(attempt, pod)).removed is True
    assert rig.proxy.count(path=r".*/log$") == 0
    assert await rig.store.redis.hlen(rig.store.key(SLUG, "attempt-startup-diagnostics")) == 0
    assert rig.proxy.count(method="DELETE") == 1


# --- when launch removal keeps the Pod ---------------------------------------------------------------


async def test_changed_uid_keeps_the_new_pod(rig: Rig) -> None:
    attempt = await rig.attempt()
    old = await rig.plant(attempt, exit_code=78)
    await pods.force_delete(rig.api, namespace=rig.namespace, name=attempt.pod_name)
    new = await rig.plant(attempt, exit_code=78)
    removal = await rig.remove(attempt, old)
    assert removal.removed is False
    assert "UID changed" in removal.why
    still = await client.CoreV1Api(rig.api).read_namespaced_pod(attempt.pod_name, rig.namespace)
    assert still.metadata.uid == new["metadata"]["uid"]
    assert await rig.startup() is None


async def test_changed_labels_keep_the_pod(rig: Rig) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    await client.CoreV1Api(rig.api).patch_namespaced_pod(
        attempt.pod_name, rig.namespace, {"metadata": {"labels": {labels.GENERATION: "2"}}}
    )
    removal = await rig.remove(attempt, pod)
    assert (removal.removed, "labels no longer match" in removal.why) == (False, True)
    assert await rig.exists(attempt)
    assert await rig.startup() is None


async def test_pod_being_deleted_is_kept(rig: Rig) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    core = client.CoreV1Api(rig.api)
    await core.patch_namespaced_pod(
        attempt.pod_name, rig.namespace, {"metadata": {"finalizers": ["test/hold"]}}
    )
    await core.delete_namespaced_pod(attempt.pod_name, rig.namespace)
    rig.proxy.reset_counts()
    try:
        removal = await rig.remove(attempt, pod)
        assert (removal.removed, removal.why) == (False, "it is already being deleted")
        assert rig.proxy.count(method="DELETE") == 0
        assert await rig.startup() is None
    finally:
        await core.patch_namespaced_pod(attempt.pod_name, rig.namespace, {"metadata": {"finalizers": None}})


async def test_pod_gone_before_the_reread_counts_as_removed(rig: Rig) -> None:
    removal = await rig.remove(
        await rig.attempt(), {"metadata": {"uid": "00000000-0000-0000-0000-000000000000"}}
    )
    assert (removal.removed, removal.why) == (True, "the pod was already gone")
    assert [c.method for c in rig.proxy.calls()] == ["GET"]


async def test_second_capture_of_an_execution_does_not_overwrite_the_first_nor_lose_its_pod(rig: Rig) -> None:
    """The first capture of an execution wins (HSETNX); a later refused Pod of it, whose capture
    is then not stored, is kept for final cleanup, which keeps its capture in attempt-retained."""
    first = await rig.attempt(generation=1)
    second = await rig.attempt(generation=2)
    pod1 = await rig.plant(first, exit_code=78, log=b"first refusal\n")
    pod2 = await rig.plant(second, exit_code=79, log=b"second refusal\n")
    assert (await rig.remove(first, pod1)).removed is True
    kept = await rig.remove(second, pod2)
    assert kept.removed is False and "holds the first capture" in kept.why
    assert await rig.exists(second)
    async with rig.runtime() as runtime:
        retained = await cleanup.run(
            runtime=runtime,
            store=rig.store,
            guard=model.Unguarded(),
            attempt=second,
            final=records.FinalRecord(
                execution="e1", generation=2, state=records.FinalState.REFUSED, outcome="attempt-outcomes"
            ),
            watermark=0,
            archived=True,
            notify=events.Collected(),
        )
    record = await rig.startup()
    assert record is not None
    assert (record.uid, record.startup.containers[0].terminated["exitCode"]) == (pod1["metadata"]["uid"], 78)
    assert (record.startup.containers[0].log or "").endswith("first refusal\n")
    [entry] = retained.removed.pods
    assert (entry.uid, entry.outcome) == (pod2["metadata"]["uid"], "deleted")
    assert entry.startup is not None and (entry.startup.containers[0].log or "").endswith("second refusal\n")


async def test_no_recorder_keeps_a_refused_pod(rig: Rig) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    async with rig.runtime(recorder=False) as runtime:
        removal = await launch.remove_at_launch(
            runtime=runtime, attempt=attempt, uid=pod["metadata"]["uid"], notify=events.Collected()
        )
    assert (removal.removed, removal.why) == (False, "it was refused and there is no recorder")
    assert await rig.exists(attempt)


async def test_forbidden_pod_log_keeps_the_pod(rig: Rig) -> None:
    """Real RBAC: a ServiceAccount that may read and delete Pods but not pods/log gets a 403."""
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    kubeconfig = await rig.service_account(
        name="no-logs", rules=[{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]}]
    )
    notify = events.Collected()
    async with rig.runtime(kubeconfig=kubeconfig) as runtime:
        removal = await launch.remove_at_launch(
            runtime=runtime,
            attempt=attempt,
            uid=pod["metadata"]["uid"],
            notify=notify,
            refused="project_unpermitted",
        )
        failures = runtime.metrics.log_read_failures.labels(path="launch", cause="refused")._value.get()
    assert removal.removed is False
    assert "403" in removal.why
    assert failures == 1
    assert await rig.exists(attempt)
    assert await rig.startup() is None
    # Nothing captured: the refusal has its own Event, then why the Pod was kept.
    assert [e[:2] for e in notify.items] == [("Warning", "HandRefused"), ("Warning", "LaunchRemovalKept")]
    assert notify.items[0][2] == f"The hand to {attempt.pod_name} was refused: project_unpermitted."


async def kept_for(rig: Rig, attempt: model.Attempt, removal: launch.Removal, *, why: str) -> None:
    """Launch removal kept ``attempt``'s Pod for ``why``, deleted nothing and stored no capture."""
    assert removal.removed is False
    assert why in removal.why
    assert await rig.exists(attempt)
    assert rig.proxy.count(method="DELETE") == 0
    assert await rig.startup() is None


@pytest.mark.parametrize("fault", ["429", "500", "timeout", "reset"])
async def test_log_read_faults_keep_the_pod(rig: Rig, fault: str) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    rig.fault(fault, path=r".*/log$")
    removal = await rig.remove(attempt, pod, timeout=1.0)
    await kept_for(rig, attempt, removal, why="its log could not be read")


async def test_redis_down_keeps_the_pod(rig: Rig, redis_server: Any) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    redis_server.stop()
    removal = await rig.remove(attempt, pod)
    redis_server.start()
    await kept_for(rig, attempt, removal, why="could not be stored")


async def test_failed_delete_reports_not_removed_and_keeps_the_whole_record(rig: Rig) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    rig.fault("503", method="DELETE", path=r".*/pods/.*")
    removal = await rig.remove(attempt, pod)
    assert removal.removed is False
    assert "the delete failed" in removal.why
    assert await rig.exists(attempt)
    record = await rig.startup()
    assert record is not None and (record.startup.containers[0].log or "").endswith("planted kind refusal\n")


# --- the log limits -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    ["invalid-utf8", "300-lines", "200KiB-line", "200-lines-of-1KiB"],
)
async def test_log_limits(rig: Rig, case: str) -> None:
    content = {
        "invalid-utf8": b"bad bytes \xff\xfe\xc3( end\n" + PLANTED,
        "300-lines": b"".join(f"line {i}\n".encode() for i in range(300)),
        "200KiB-line": b"L" * (200 * 1024) + b" tail of the long line\n",
        "200-lines-of-1KiB": b"".join(f"{i:03d} ".encode() + b"x" * 1020 + b"\n" for i in range(200)),
    }[case]
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78, log=content)
    rig.proxy.reset_counts()
    assert (await rig.remove(attempt, pod)).removed is True
    record = await rig.startup()
    assert record is not None
    [container] = record.startup.containers
    log = container.log or ""
    assert len(log.encode()) <= 64 * 1024
    log_calls = rig.proxy.matching_calls(path=r".*/log$")
    assert "limitBytes=65536" in log_calls[0].query and "tailLines=200" in log_calls[0].query
    lines = log.splitlines()
    if case == "invalid-utf8":
        assert lines[0].endswith("bad bytes \ufffd\ufffd\ufffd( end")
        assert container.log_truncated is None and len(log_calls) == 1
    elif case == "300-lines":
        assert len(lines) == 200
        assert lines[0].endswith(" line 100") and lines[-1].endswith(" line 299")
        assert container.log_truncated is None and len(log_calls) == 1
    elif case == "200KiB-line":
        assert container.log_truncated is True
        assert log.endswith(" tail of the long line\n")
        assert len(log_calls) == 2  # The capped read, then the newest end.
    else:
        assert container.log_truncated is True
        assert lines[-1].split(" ", 1)[1].startswith("199 ")  # The newest line is kept whole...
        assert all(len(line.split(" ", 1)[1]) == 1024 for line in lines)  # ...and only whole lines.
        assert len(log_calls) == 2


async def test_an_empty_log_of_a_just_ended_container_is_read_again_before_the_delete(rig: Rig) -> None:
    """A real kubelet may answer an empty log for a container whose exit it already reports (the
    runtime's log relay writes the last line a moment later): the proxy answers the first read so;
    the capture reads again, stores the line, and only then deletes the Pod."""
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78, reason="Error")
    rig.proxy.add_rule(
        method="GET", path=r".*/pods/[^/]+/log$", action=Respond(status=200, body=b""), times=1
    )
    rig.proxy.reset_counts()
    async with rig.runtime() as runtime:
        removal = await launch.remove_at_launch(
            runtime=runtime, attempt=attempt, uid=pod["metadata"]["uid"], notify=events.Collected()
        )
        rereads = runtime.metrics.log_rereads.labels(path="launch", result="filled")._value.get()
    assert removal.removed is True
    assert len(rig.proxy.matching_calls(path=r".*/log$")) == 2
    record = await rig.startup()
    assert record is not None
    [container] = record.startup.containers
    assert (container.log or "").endswith("Z worker startup refused: planted kind refusal\n")
    assert container.log_rereads == 1
    assert rereads == 1


# --- launch and the hand -------------------------------------------------------------------------------


async def test_launch_creates_the_worker_pod_and_hands_it_the_grant(rig: Rig) -> None:
    attempt = await rig.attempt()
    async with rig.runtime() as runtime:
        launched = await launch_e1(runtime, attempt, terminal_port=7681, task={"goal": "x"})
    core = client.CoreV1Api(rig.api)
    pod = await core.read_namespaced_pod(attempt.pod_name, rig.namespace)
    assert launched.hand == records.HandResult(
        generation=1, handed=True, pod=attempt.pod_name, pod_uid=pod.metadata.uid, terminal=True
    )
    # Owned by its Execution (the only proof it is the operator's), held for its evidence.
    [owner] = pod.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "Execution",
        "e1",
        attempt.owner_uid,
        True,
    )
    assert pod.metadata.finalizers == [owners.EVIDENCE_FINALIZER]
    assert pod.spec.restart_policy == "Never"
    assert {k: v for k, v in pod.metadata.labels.items() if k in attempt.labels} == attempt.labels
    grant = await core.read_namespaced_config_map("swarm-grant-e1-1", rig.namespace)
    assert grant.immutable is True
    assert [(r.kind, r.uid) for r in grant.metadata.owner_references] == [("Pod", pod.metadata.uid)]
    assert json.loads(grant.data["grant.json"]) == {
        "swarm": SLUG,
        "execution": "e1",
        "generation": 1,
        "project": "allowed",
        "task": {"goal": "x"},
    }
    service = await core.read_namespaced_service("swarm-terminal-e1-1", rig.namespace)
    assert service.spec.selector == attempt.labels


async def test_launch_adopts_its_own_pod_and_never_touches_a_foreign_one(rig: Rig) -> None:
    attempt = await rig.attempt()
    ours = await rig.plant(attempt, phase=None, log=None)
    foreign = await rig.attempt(execution="e2")
    core = client.CoreV1Api(rig.api)
    await core.create_namespaced_pod(
        rig.namespace,
        cast(
            Any,
            pods.worker_pod(name=foreign.pod_name, namespace=rig.namespace, labels={"app": "someone-else"}),
        ),
    )
    spec = swarm_spec()
    async with rig.runtime() as runtime:
        adopted = await launch.ensure_pod(pods=runtime.cluster.pods, attempt=attempt, worker=spec.worker)
        with pytest.raises(launch.ForeignPod):
            await launch.ensure_pod(pods=runtime.cluster.pods, attempt=foreign, worker=spec.worker)
    assert adopted["metadata"]["uid"] == ours["metadata"]["uid"]
    still = await core.read_namespaced_pod(foreign.pod_name, rig.namespace)
    assert still.metadata.labels == {"app": "someone-else"} and still.metadata.deletion_timestamp is None


async def test_project_unpermitted_removes_a_refused_pod_after_storing_its_record(rig: Rig) -> None:
    attempt = await rig.attempt()
    await rig.plant(attempt, exit_code=78, reason="Error")
    notify = events.Collected()
    async with rig.runtime() as runtime:
        launched = await launch_e1(runtime, attempt, project="outside", notify=notify)
    hand = launched.hand
    assert (hand.handed, hand.reason, hand.removed) == (False, "project_unpermitted", True)
    assert launched.detail == ""  # No API server refused anything: the reason says it all.
    record = await rig.startup()
    assert record is not None and record.startup.containers[0].terminated["exitCode"] == 78
    # One Event for the refused launch: the captured startup, naming the refusal.
    [(kind, reason, message)] = notify.items
    assert (kind, reason) == ("Warning", "StartupRefused")
    assert message.startswith(f"Worker pod {attempt.pod_name} (the hand was refused: project_unpermitted): ")
    assert message.endswith("worker startup refused: planted kind refusal")


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("exists", "config_map_exists"),
        ("403", "config_map_refused"),
        ("422", "config_map_refused"),
        ("500", "config_map_unavailable"),
        ("429", "config_map_unavailable"),
        ("timeout", "config_map_unavailable"),
        ("terminal-403", "terminal_refused"),
    ],
)
async def test_each_hand_reason_triggers_launch_removal(rig: Rig, fault: str, reason: str) -> None:
    attempt = await rig.attempt()
    await rig.plant(attempt, exit_code=78)
    if fault == "exists":
        await client.CoreV1Api(rig.api).create_namespaced_config_map(
            rig.namespace, cast(Any, {"metadata": {"name": "swarm-grant-e1-1"}, "data": {"someone": "else"}})
        )
    elif fault == "terminal-403":
        rig.fault("403", method="POST", path=r".*/services$")
    else:
        rig.fault(fault, method="POST", path=r".*/configmaps$")
    async with rig.runtime(timeout=1.0) as runtime:
        launched = await launch_e1(runtime, attempt, terminal_port=7681)
        hands = runtime.metrics.hands.labels(reason=reason)._value.get()
    hand = launched.hand
    assert (hand.handed, hand.reason, hand.removed) == (False, reason, True)
    assert hands == 1
    if fault in ("403", "422"):  # The condition names the object and quotes the API server.
        assert launched.detail.startswith(
            f"the API server refused ConfigMap {rig.namespace}/swarm-grant-e1-1: {fault} "
        ), launched.detail
    elif fault == "terminal-403":
        assert launched.detail.startswith(
            f"the API server refused Service {rig.namespace}/swarm-terminal-e1-1: 403 "
        )
    record = await rig.startup()
    assert record is not None and record.startup.containers[0].terminated["exitCode"] == 78


class LosesLeadershipBefore:
    def __init__(self, step: str) -> None:
        self.step = step

    def check(self, *, before: str) -> None:
        if before.startswith(self.step):
            raise leadership.NotLeader(f"lost the lease before {before}")


@pytest.mark.parametrize("step", ["storing the launch capture", "deleting pod"])
async def test_launch_removal_stops_before_a_write_or_delete_without_the_lease(rig: Rig, step: str) -> None:
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78)
    async with rig.runtime() as runtime:
        with pytest.raises(leadership.NotLeader):
            await launch.remove_at_launch(
                runtime=runtime,
                attempt=attempt,
                uid=pod["metadata"]["uid"],
                notify=events.Collected(),
                guard=LosesLeadershipBefore(step),
            )
    assert rig.proxy.count(method="DELETE") == 0
    assert await rig.exists(attempt)
    stored = await rig.startup()
    assert (stored is not None) is (step == "deleting pod")


# --- a refused worker Pod (issue 13) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "permanent"),
    [
        ("400", True),
        ("422", True),
        ("403", False),
        ("409", False),
        ("429", False),
        ("500", False),
        ("timeout", False),
    ],
)
async def test_only_a_400_or_422_on_the_pod_is_a_permanent_refusal(
    rig: Rig, fault: str, permanent: bool
) -> None:
    attempt = await rig.attempt()
    rig.fault(fault, method="POST", path=r".*/pods$")
    async with rig.runtime(timeout=1.0) as runtime:
        with pytest.raises(errors.SwarmError) as raised:
            await launch_e1(runtime, attempt)
    if permanent:
        assert isinstance(raised.value, errors.SpecRejected)
        assert (raised.value.kind, raised.value.name) == ("Pod", attempt.pod_name)
        assert str(raised.value).startswith(
            f"The API server refused Pod {rig.namespace}/{attempt.pod_name}: {fault} "
        )
    else:
        assert isinstance(raised.value, errors.ApiError)  # The handler retries it (LaunchFailed).
    assert not await rig.exists(attempt)


async def test_its_own_pod_deleted_before_the_launch_recorded_it_is_captured_released_and_made_anew(
    rig: Rig,
) -> None:
    """A launch stopped after creating its Pod; someone deleted the Pod, refused by then. Its
    evidence finalizer holds it: the next launch captures it (the launch record), releases it and
    says so; the launch after that makes the attempt's Pod anew."""
    attempt = await rig.attempt()
    old = await rig.plant(attempt, exit_code=78, reason="Error")
    await client.CoreV1Api(rig.api).delete_namespaced_pod(attempt.pod_name, rig.namespace)
    notify = events.Collected()
    async with rig.runtime() as runtime:
        with pytest.raises(errors.ApiUnavailable, match=r"being deleted by someone else.*capture is stored"):
            await launch_e1(runtime, attempt, notify=notify)
        await gone(rig.api, rig.namespace, attempt.pod_name)
        record = await rig.startup()
        assert record is not None and record.uid == old["metadata"]["uid"]
        assert (record.startup.containers[0].log or "").endswith(PLANTED.decode())
        assert [reason for _, reason, _ in notify.items] == ["StartupRefused"]
        launched = await launch_e1(runtime, attempt)
    assert launched.hand.handed is True
    assert launched.hand.pod_uid not in (None, old["metadata"]["uid"])
