"""Launch, the hand and launch removal, against the real API server (through the fault proxy)
and the real Redis. Every branch of the spec's "Launch removal" and each hand reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import errors, records, resources
from agentihooks_swarm.controller import leadership
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import cleanup, events, launch, model
from agentihooks_swarm.storage import operations
from tests.support import pods, rbac
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import RuntimeFactory
from tests.support.planting import PLANTED, SLUG, attempt_for, plant_pod, remove
from tests.support.proxy import FaultProxy, Respond

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


async def pod_exists(api: client.ApiClient, attempt: model.Attempt) -> bool:
    return await pods.pod_exists(api, namespace=attempt.namespace, name=attempt.pod_name)


# --- what counts as refused ------------------------------------------------------------------------


@pytest.mark.smoke  # make check's one integration test: a launch removal, capture then delete
async def test_refused_pod_is_captured_stored_and_deleted_with_minimal_calls(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78, reason="Error")
    notify = events.Collected()
    fault_proxy.reset_counts()
    async with runtime_for(proxy_kubeconfig) as runtime:
        removal = await launch.remove_at_launch(
            runtime=runtime, attempt=attempt, uid=pod["metadata"]["uid"], notify=notify
        )
    assert removal.removed is True
    calls = [(c.method, c.path) for c in fault_proxy.calls()]
    base = f"/api/v1/namespaces/{namespace}/pods/{attempt.pod_name}"
    # The spec's calls, and (additive) one list of the Pod's own Events for the capture.
    assert calls == [
        ("GET", base),
        ("GET", base + "/log"),
        ("GET", f"/api/v1/namespaces/{namespace}/events"),
        ("DELETE", base),
    ]
    await pods.wait_for_absent(
        read=lambda: client.CoreV1Api(admin_api).read_namespaced_pod(attempt.pod_name, namespace),
        what="the refused pod",
    )

    raw = await store.redis.hget(store.key(SLUG, "attempt-startup-diagnostics"), "e1")
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


async def test_init_container_failure_is_refused(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    attempt = attempt_for(namespace)
    await pods.plant_log(
        cluster=control_plane,
        namespace=namespace,
        pod=attempt.pod_name,
        container="init",
        content=b"init: cannot fetch credentials\n",
    )
    pod = await plant_pod(
        admin_api,
        control_plane,
        attempt=attempt,
        phase=None,
        log=None,
        init_exit_code=3,
        message="init refused",
    )
    async with runtime_for(proxy_kubeconfig) as runtime:
        assert (await remove(runtime, attempt, pod["metadata"]["uid"])).removed is True
    record = await store.read_startup(slug=SLUG, execution="e1")
    assert record is not None
    assert record.startup.phase == "Failed"
    assert [c.name for c in record.startup.containers] == ["init"]
    assert record.startup.containers[0].terminated["exitCode"] == 3
    assert record.startup.containers[0].terminated["message"] == "init refused"
    assert record.startup.containers[0].log is not None
    assert record.startup.containers[0].log.endswith("init: cannot fetch credentials\n")


@pytest.mark.parametrize("phase", ["Running", "Succeeded"])
async def test_not_refused_is_deleted_without_a_record(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
    phase: str,
) -> None:
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, phase=phase, log=None)
    fault_proxy.reset_counts()
    async with runtime_for(proxy_kubeconfig) as runtime:
        assert (await remove(runtime, attempt, pod["metadata"]["uid"])).removed is True
    assert fault_proxy.count(path=r".*/log$") == 0
    assert await store.redis.hlen(store.key(SLUG, "attempt-startup-diagnostics")) == 0
    assert fault_proxy.count(method="DELETE") == 1


# --- when launch removal keeps the Pod ---------------------------------------------------------------


async def test_changed_uid_keeps_the_new_pod(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    attempt = attempt_for(namespace)
    old = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78)
    core = client.CoreV1Api(admin_api)
    await core.delete_namespaced_pod(attempt.pod_name, namespace, grace_period_seconds=0)
    await pods.wait_for_absent(
        read=lambda: core.read_namespaced_pod(attempt.pod_name, namespace), what="old pod"
    )
    new = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78)
    async with runtime_for(proxy_kubeconfig) as runtime:
        removal = await remove(runtime, attempt, old["metadata"]["uid"])
    assert removal.removed is False
    assert "UID changed" in removal.why
    still = await core.read_namespaced_pod(attempt.pod_name, namespace)
    assert still.metadata.uid == new["metadata"]["uid"]
    assert await store.read_startup(slug=SLUG, execution="e1") is None


async def test_changed_labels_keep_the_pod(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78)
    core = client.CoreV1Api(admin_api)
    await core.patch_namespaced_pod(
        attempt.pod_name, namespace, {"metadata": {"labels": {labels.GENERATION: "2"}}}
    )
    async with runtime_for(proxy_kubeconfig) as runtime:
        removal = await remove(runtime, attempt, pod["metadata"]["uid"])
    assert (removal.removed, "labels no longer match" in removal.why) == (False, True)
    assert await pod_exists(admin_api, attempt)
    assert await store.read_startup(slug=SLUG, execution="e1") is None


async def test_pod_being_deleted_is_kept(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78)
    core = client.CoreV1Api(admin_api)
    await core.patch_namespaced_pod(attempt.pod_name, namespace, {"metadata": {"finalizers": ["test/hold"]}})
    await core.delete_namespaced_pod(attempt.pod_name, namespace)
    fault_proxy.reset_counts()
    try:
        async with runtime_for(proxy_kubeconfig) as runtime:
            removal = await remove(runtime, attempt, pod["metadata"]["uid"])
        assert (removal.removed, removal.why) == (False, "it is already being deleted")
        assert fault_proxy.count(method="DELETE") == 0
        assert await store.read_startup(slug=SLUG, execution="e1") is None
    finally:
        await core.patch_namespaced_pod(attempt.pod_name, namespace, {"metadata": {"finalizers": None}})


async def test_pod_gone_before_the_reread_counts_as_removed(
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    attempt = attempt_for(namespace)
    async with runtime_for(proxy_kubeconfig) as runtime:
        removal = await remove(runtime, attempt, "00000000-0000-0000-0000-000000000000")
    assert (removal.removed, removal.why) == (True, "the pod was already gone")
    assert [c.method for c in fault_proxy.calls()] == ["GET"]


async def test_second_capture_of_an_execution_does_not_overwrite_the_first_nor_lose_its_pod(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    """The first capture of an execution wins (HSETNX); a later refused Pod of it, whose capture
    is then not stored, is kept for final cleanup, which keeps its capture in attempt-retained."""
    first = attempt_for(namespace, generation=1)
    second = attempt_for(namespace, generation=2)
    pod1 = await plant_pod(admin_api, control_plane, attempt=first, exit_code=78, log=b"first refusal\n")
    pod2 = await plant_pod(admin_api, control_plane, attempt=second, exit_code=79, log=b"second refusal\n")
    async with runtime_for(proxy_kubeconfig) as runtime:
        assert (await remove(runtime, first, pod1["metadata"]["uid"])).removed is True
        kept = await remove(runtime, second, pod2["metadata"]["uid"])
        assert kept.removed is False and "holds the first capture" in kept.why
        assert await pods.pod_exists(admin_api, namespace=namespace, name=second.pod_name)
        retained = await cleanup.run(
            runtime=runtime,
            store=store,
            guard=model.Unguarded(),
            attempt=second,
            final=records.FinalRecord(
                execution="e1", generation=2, state=records.FinalState.REFUSED, outcome="attempt-outcomes"
            ),
            watermark=0,
            archived=True,
            notify=events.Collected(),
        )
    record = await store.read_startup(slug=SLUG, execution="e1")
    assert record is not None
    assert (record.uid, record.startup.containers[0].terminated["exitCode"]) == (pod1["metadata"]["uid"], 78)
    assert (record.startup.containers[0].log or "").endswith("first refusal\n")
    [entry] = retained.removed.pods
    assert (entry.uid, entry.outcome) == (pod2["metadata"]["uid"], "deleted")
    assert entry.startup is not None and (entry.startup.containers[0].log or "").endswith("second refusal\n")


async def test_no_recorder_keeps_a_refused_pod(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
) -> None:
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78)
    async with runtime_for(proxy_kubeconfig, recorder=False) as runtime:
        removal = await remove(runtime, attempt, pod["metadata"]["uid"])
    assert (removal.removed, removal.why) == (False, "it was refused and there is no recorder")
    assert await pod_exists(admin_api, attempt)


async def test_forbidden_pod_log_keeps_the_pod(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    """Real RBAC: a ServiceAccount that may read and delete Pods but not pods/log gets a 403."""
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78)
    kubeconfig = await rbac.service_account_with_rules(
        admin_api,
        control_plane,
        namespace=namespace,
        name="no-logs",
        kubeconfig=tmp_path / "sa.kubeconfig",
        rules=[{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]}],
    )
    notify = events.Collected()
    async with runtime_for(kubeconfig) as runtime:
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
    assert await pod_exists(admin_api, attempt)
    assert await store.read_startup(slug=SLUG, execution="e1") is None
    # Nothing captured: the refusal has its own Event, then why the Pod was kept.
    assert [e[:2] for e in notify.items] == [("Warning", "HandRefused"), ("Warning", "LaunchRemovalKept")]
    assert notify.items[0][2] == f"The hand to {attempt.pod_name} was refused: project_unpermitted."


@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        ("429", "ConnectionError"),
        ("500", "ConnectionError"),
        ("timeout", "TimeoutError"),
        ("reset", "ConnectionError"),
    ],
)
async def test_log_read_faults_keep_the_pod(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
    fault: str,
    cause: str,
) -> None:
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78)
    if fault == "timeout":
        fault_proxy.hang(path=r".*/log$", times=None)
    elif fault == "reset":
        fault_proxy.reset(path=r".*/log$", times=None)
    else:
        fault_proxy.fail(status=int(fault), path=r".*/log$", times=None)
    async with runtime_for(proxy_kubeconfig, timeout=1.0) as runtime:
        removal = await remove(runtime, attempt, pod["metadata"]["uid"])
    assert removal.removed is False
    assert "its log could not be read" in removal.why
    assert await pod_exists(admin_api, attempt)
    assert fault_proxy.count(method="DELETE") == 0
    assert await store.read_startup(slug=SLUG, execution="e1") is None


async def test_redis_down_keeps_the_pod(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
    redis_server: Any,
) -> None:
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78)
    redis_server.stop()
    async with runtime_for(proxy_kubeconfig) as runtime:
        removal = await remove(runtime, attempt, pod["metadata"]["uid"])
    redis_server.start()
    assert removal.removed is False
    assert "could not be stored" in removal.why
    assert fault_proxy.count(method="DELETE") == 0
    assert await pod_exists(admin_api, attempt)
    assert await store.read_startup(slug=SLUG, execution="e1") is None


async def test_failed_delete_reports_not_removed_and_keeps_the_whole_record(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78)
    fault_proxy.fail(status=503, method="DELETE", path=r".*/pods/.*", times=None)
    async with runtime_for(proxy_kubeconfig) as runtime:
        removal = await remove(runtime, attempt, pod["metadata"]["uid"])
    assert removal.removed is False
    assert "the delete failed" in removal.why
    assert await pod_exists(admin_api, attempt)
    record = await store.read_startup(slug=SLUG, execution="e1")
    assert record is not None and (record.startup.containers[0].log or "").endswith("planted kind refusal\n")


# --- the log limits -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    ["invalid-utf8", "300-lines", "200KiB-line", "200-lines-of-1KiB"],
)
async def test_log_limits(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
    case: str,
) -> None:
    content = {
        "invalid-utf8": b"bad bytes \xff\xfe\xc3( end\n" + PLANTED,
        "300-lines": b"".join(f"line {i}\n".encode() for i in range(300)),
        "200KiB-line": b"L" * (200 * 1024) + b" tail of the long line\n",
        "200-lines-of-1KiB": b"".join(f"{i:03d} ".encode() + b"x" * 1020 + b"\n" for i in range(200)),
    }[case]
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78, log=content)
    fault_proxy.reset_counts()
    async with runtime_for(proxy_kubeconfig) as runtime:
        assert (await remove(runtime, attempt, pod["metadata"]["uid"])).removed is True
    record = await store.read_startup(slug=SLUG, execution="e1")
    assert record is not None
    [container] = record.startup.containers
    log = container.log or ""
    assert len(log.encode()) <= 64 * 1024
    log_calls = fault_proxy.matching_calls(path=r".*/log$")
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


async def test_an_empty_log_of_a_just_ended_container_is_read_again_before_the_delete(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    """A real kubelet may answer an empty log for a container whose exit it already reports (the
    runtime's log relay writes the last line a moment later): the proxy answers the first read so;
    the capture reads again, stores the line, and only then deletes the Pod."""
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78, reason="Error")
    fault_proxy.add_rule(
        method="GET", path=r".*/pods/[^/]+/log$", action=Respond(status=200, body=b""), times=1
    )
    fault_proxy.reset_counts()
    async with runtime_for(proxy_kubeconfig) as runtime:
        assert (await remove(runtime, attempt, pod["metadata"]["uid"])).removed is True
        rereads = runtime.metrics.log_rereads.labels(path="launch", result="filled")._value.get()
    assert len(fault_proxy.matching_calls(path=r".*/log$")) == 2
    record = await store.read_startup(slug=SLUG, execution="e1")
    assert record is not None
    [container] = record.startup.containers
    assert (container.log or "").endswith("Z worker startup refused: planted kind refusal\n")
    assert container.log_rereads == 1
    assert rereads == 1


# --- launch and the hand -------------------------------------------------------------------------------


async def test_launch_creates_the_worker_pod_and_hands_it_the_grant(
    admin_api: client.ApiClient,
    namespace: str,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
) -> None:
    attempt = attempt_for(namespace)
    async with runtime_for(proxy_kubeconfig) as runtime:
        launched = await launch.launch(
            runtime=runtime,
            attempt=attempt,
            swarm=swarm_spec(terminal_port=7681),
            execution=resources.parse_execution(
                name="e1", spec={"swarm": SLUG, "project": "allowed", "task": {"goal": "x"}}
            ),
            notify=events.Collected(),
        )
    assert launched.hand == records.HandResult(generation=1, handed=True, pod=attempt.pod_name)
    core = client.CoreV1Api(admin_api)
    pod = await core.read_namespaced_pod(attempt.pod_name, namespace)
    assert pod.spec.restart_policy == "Never"
    assert {k: v for k, v in pod.metadata.labels.items() if k in attempt.labels} == attempt.labels
    grant = await core.read_namespaced_config_map("swarm-grant-e1-1", namespace)
    assert grant.immutable is True
    assert [(r.kind, r.uid) for r in grant.metadata.owner_references] == [("Pod", pod.metadata.uid)]
    assert json.loads(grant.data["grant.json"]) == {
        "swarm": SLUG,
        "execution": "e1",
        "generation": 1,
        "project": "allowed",
        "task": {"goal": "x"},
    }
    service = await core.read_namespaced_service("swarm-terminal-e1-1", namespace)
    assert service.spec.selector == attempt.labels


async def test_launch_adopts_its_own_pod_and_never_touches_a_foreign_one(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
) -> None:
    attempt = attempt_for(namespace)
    ours = await plant_pod(admin_api, control_plane, attempt=attempt, phase=None, log=None)
    foreign = attempt_for(namespace, execution="e2")
    core = client.CoreV1Api(admin_api)
    await core.create_namespaced_pod(
        namespace,
        cast(
            Any, pods.worker_pod(name=foreign.pod_name, namespace=namespace, labels={"app": "someone-else"})
        ),
    )
    spec = swarm_spec()
    async with runtime_for(proxy_kubeconfig) as runtime:
        adopted = await launch.ensure_pod(client=runtime.pods, attempt=attempt, worker=spec.worker)
        with pytest.raises(launch.ForeignPod):
            await launch.ensure_pod(client=runtime.pods, attempt=foreign, worker=spec.worker)
    assert adopted["metadata"]["uid"] == ours["metadata"]["uid"]
    still = await core.read_namespaced_pod(foreign.pod_name, namespace)
    assert still.metadata.labels == {"app": "someone-else"} and still.metadata.deletion_timestamp is None


async def test_project_unpermitted_removes_a_refused_pod_after_storing_its_record(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
) -> None:
    attempt = attempt_for(namespace)
    await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78, reason="Error")
    notify = events.Collected()
    async with runtime_for(proxy_kubeconfig) as runtime:
        launched = await launch.launch(
            runtime=runtime,
            attempt=attempt,
            swarm=swarm_spec(),
            execution=resources.parse_execution(name="e1", spec={"swarm": SLUG, "project": "outside"}),
            notify=notify,
        )
    hand = launched.hand
    assert (hand.handed, hand.reason, hand.removed) == (False, "project_unpermitted", True)
    assert launched.detail == ""  # No API server refused anything: the reason says it all.
    record = await store.read_startup(slug=SLUG, execution="e1")
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
async def test_each_hand_reason_triggers_launch_removal(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
    fault: str,
    reason: str,
) -> None:
    attempt = attempt_for(namespace)
    await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78)
    if fault == "exists":
        await client.CoreV1Api(admin_api).create_namespaced_config_map(
            namespace, cast(Any, {"metadata": {"name": "swarm-grant-e1-1"}, "data": {"someone": "else"}})
        )
    elif fault == "timeout":
        fault_proxy.hang(method="POST", path=r".*/configmaps$", times=None)
    elif fault == "terminal-403":
        fault_proxy.fail(status=403, method="POST", path=r".*/services$", times=None)
    else:
        fault_proxy.fail(status=int(fault), method="POST", path=r".*/configmaps$", times=None)
    async with runtime_for(proxy_kubeconfig, timeout=1.0) as runtime:
        launched = await launch.launch(
            runtime=runtime,
            attempt=attempt,
            swarm=swarm_spec(terminal_port=7681),
            execution=resources.parse_execution(name="e1", spec={"swarm": SLUG, "project": "allowed"}),
            notify=events.Collected(),
        )
        hands = runtime.metrics.hands.labels(reason=reason)._value.get()
    hand = launched.hand
    assert (hand.handed, hand.reason, hand.removed) == (False, reason, True)
    assert hands == 1
    if fault in ("403", "422"):  # The condition names the object and quotes the API server.
        assert launched.detail.startswith(
            f"the API server refused ConfigMap {namespace}/swarm-grant-e1-1: {fault} "
        ), launched.detail
    elif fault == "terminal-403":
        assert launched.detail.startswith(
            f"the API server refused Service {namespace}/swarm-terminal-e1-1: 403 "
        )
    record = await store.read_startup(slug=SLUG, execution="e1")
    assert record is not None and record.startup.containers[0].terminated["exitCode"] == 78


class LosesLeadershipBefore:
    def __init__(self, step: str) -> None:
        self.step = step

    def check(self, *, before: str) -> None:
        if before.startswith(self.step):
            raise leadership.NotLeader(f"lost the lease before {before}")


@pytest.mark.parametrize("step", ["storing the launch capture", "deleting pod"])
async def test_launch_removal_stops_before_a_write_or_delete_without_the_lease(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
    step: str,
) -> None:
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78)
    async with runtime_for(proxy_kubeconfig) as runtime:
        with pytest.raises(leadership.NotLeader):
            await launch.remove_at_launch(
                runtime=runtime,
                attempt=attempt,
                uid=pod["metadata"]["uid"],
                notify=events.Collected(),
                guard=LosesLeadershipBefore(step),
            )
    assert fault_proxy.count(method="DELETE") == 0
    assert await pod_exists(admin_api, attempt)
    stored = await store.read_startup(slug=SLUG, execution="e1")
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
    admin_api: client.ApiClient,
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    fault: str,
    permanent: bool,
) -> None:
    attempt = attempt_for(namespace)
    if fault == "timeout":
        fault_proxy.hang(method="POST", path=r".*/pods$", times=None)
    else:
        fault_proxy.fail(status=int(fault), method="POST", path=r".*/pods$", times=None)
    async with runtime_for(proxy_kubeconfig, timeout=1.0) as runtime:
        with pytest.raises(errors.SwarmError) as raised:
            await launch.launch(
                runtime=runtime,
                attempt=attempt,
                swarm=swarm_spec(),
                execution=resources.parse_execution(name="e1", spec={"swarm": SLUG, "project": "allowed"}),
                notify=events.Collected(),
            )
    if permanent:
        assert isinstance(raised.value, errors.SpecRejected)
        assert (raised.value.kind, raised.value.name) == ("Pod", attempt.pod_name)
        assert str(raised.value).startswith(
            f"The API server refused Pod {namespace}/{attempt.pod_name}: {fault} "
        )
    else:
        assert isinstance(raised.value, errors.ApiError)  # The handler retries it (LaunchFailed).
    assert not await pods.pod_exists(admin_api, namespace=namespace, name=attempt.pod_name)
