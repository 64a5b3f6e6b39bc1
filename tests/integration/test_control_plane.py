"""Smoke tests of the local control plane every integration test stands on.

Each test checks one promise of tests/support/cluster.py or tests/support/pods.py against the
real kube-apiserver (RBAC, Pod Security, preconditions, garbage collection) and kwok (Pod
lifecycle from annotations, container logs proxied through kube-apiserver).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support.cluster import KUBERNETES_VERSION, NODE_NAME, ControlPlane
from tests.support.fixtures_cluster import api_client
from tests.support.pods import (
    plant_log,
    plant_shared_log,
    read_log,
    wait_for_absent,
    wait_for_phase,
    worker_pod,
)

pytestmark = pytest.mark.integration

REFUSAL = b"worker startup refused: planted kind refusal\n"
TIMESTAMP = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z $")


def _strip_timestamp(line: bytes) -> bytes:
    stamp, _, rest = line.partition(b" ")
    assert TIMESTAMP.match(stamp + b" "), line[:60]
    return rest


async def _create_pod(api: client.ApiClient, manifest: dict[str, Any]) -> Any:
    body = cast(client.V1Pod, manifest)  # the client serialises plain dicts as they are
    return await client.CoreV1Api(api).create_namespaced_pod(manifest["metadata"]["namespace"], body)


async def test_api_server_version(admin_api: client.ApiClient) -> None:
    version = await client.VersionApi(admin_api).get_code()
    assert version.git_version == KUBERNETES_VERSION == "v1.37.2"


async def test_static_admin_token_is_cluster_admin(control_plane: ControlPlane) -> None:
    review = await asyncio.to_thread(
        control_plane.request_json,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert "system:masters" in review["status"]["userInfo"]["groups"]
    async with api_client(kubeconfig=control_plane.token_kubeconfig) as api:
        nodes = await client.CoreV1Api(api).list_node()
    assert [n.metadata.name for n in nodes.items] == [NODE_NAME]


async def test_rbac_refuses_service_account_until_granted(
    control_plane: ControlPlane, namespace: str, admin_api: client.ApiClient, tmp_path: Path
) -> None:
    core = client.CoreV1Api(admin_api)
    await core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    )
    kubeconfig = await asyncio.to_thread(
        control_plane.service_account_kubeconfig,
        namespace=namespace,
        name="reader",
        path=tmp_path / "sa.kubeconfig",
    )
    async with api_client(kubeconfig=kubeconfig) as api:
        with pytest.raises(ApiException) as refused:
            await client.CoreV1Api(api).list_namespaced_pod(namespace)
        assert refused.value.status == 403
        assert f"system:serviceaccount:{namespace}:reader" in str(refused.value.body)

        rbac = client.RbacAuthorizationV1Api(admin_api)
        await rbac.create_namespaced_role(
            namespace,
            client.V1Role(
                metadata=client.V1ObjectMeta(name="pod-reader"),
                rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"])],
            ),
        )
        await rbac.create_namespaced_role_binding(
            namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="pod-reader"),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"
                ),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)],
            ),
        )
        deadline = time.monotonic() + 10
        while True:  # the RBAC authorizer sees new bindings through its informer
            try:
                pods = await client.CoreV1Api(api).list_namespaced_pod(namespace)
                break
            except ApiException as error:
                if error.status != 403 or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        assert pods.items == []
        with pytest.raises(ApiException) as still_refused:  # the grant is for pods only
            await client.CoreV1Api(api).list_namespaced_config_map(namespace)
        assert still_refused.value.status == 403


async def test_pod_security_baseline_is_enforced(namespace: str, admin_api: client.ApiClient) -> None:
    manifest = worker_pod(name="privileged", namespace=namespace)
    manifest["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(ApiException) as refused:
        await _create_pod(admin_api, manifest)
    assert refused.value.status == 403
    assert "violates PodSecurity" in str(refused.value.body)


async def test_delete_with_stale_uid_precondition_conflicts(
    namespace: str, admin_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(admin_api)
    first = await _create_pod(admin_api, worker_pod(name="reused", namespace=namespace))
    await wait_for_phase(admin_api, namespace=namespace, name="reused", phase="Running")
    await core.delete_namespaced_pod("reused", namespace)
    await wait_for_absent(read=lambda: core.read_namespaced_pod("reused", namespace), what="Pod reused")
    second = await _create_pod(admin_api, worker_pod(name="reused", namespace=namespace))
    assert second.metadata.uid != first.metadata.uid

    with pytest.raises(ApiException) as conflict:
        await core.delete_namespaced_pod(
            "reused",
            namespace,
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=first.metadata.uid)),
        )
    assert conflict.value.status == 409
    assert (await core.read_namespaced_pod("reused", namespace)).metadata.uid == second.metadata.uid


async def test_refused_worker_fails_with_exit_78_and_planted_log(
    control_plane: ControlPlane, namespace: str, admin_api: client.ApiClient
) -> None:
    # Planted before the Pod exists, as for a worker the operator creates later.
    await plant_log(
        cluster=control_plane, namespace=namespace, pod="refused", container="worker", content=REFUSAL
    )
    await _create_pod(
        admin_api, worker_pod(name="refused", namespace=namespace, phase="Failed", exit_code=78, run_for="1s")
    )
    pod = await wait_for_phase(admin_api, namespace=namespace, name="refused", phase="Failed")

    assert pod.spec.node_name == NODE_NAME  # placed by kube-scheduler
    [status] = pod.status.container_statuses
    terminated = status.state.terminated
    assert (terminated.exit_code, terminated.reason, terminated.message) == (78, "Error", None)
    assert terminated.started_at is not None and terminated.finished_at is not None
    assert terminated.finished_at >= terminated.started_at
    assert terminated.container_id == f"kwok://{pod.metadata.uid}-worker"

    body = await read_log(admin_api, namespace=namespace, pod="refused", container="worker")
    assert _strip_timestamp(body) == REFUSAL


async def test_init_container_failure_fails_pod_before_main_containers(
    control_plane: ControlPlane, namespace: str, admin_api: client.ApiClient
) -> None:
    await plant_log(
        cluster=control_plane,
        namespace=namespace,
        pod="init-refused",
        container="setup",
        content=b"no config\n",
    )
    manifest = worker_pod(
        name="init-refused",
        namespace=namespace,
        init_containers=["fetch", "setup", "late"],
        init_container="setup",
        init_exit_code=3,
        message="config missing",
        pod_reason="InitFailed",
    )
    await _create_pod(admin_api, manifest)
    pod = await wait_for_phase(admin_api, namespace=namespace, name="init-refused", phase="Failed")

    assert pod.status.reason == "InitFailed"
    fetch, setup, late = pod.status.init_container_statuses
    assert (fetch.state.terminated.exit_code, fetch.state.terminated.reason) == (0, "Completed")
    assert (setup.state.terminated.exit_code, setup.state.terminated.reason) == (3, "Error")
    assert setup.state.terminated.message == "config missing"
    assert late.state.waiting.reason == "PodInitializing"
    [worker] = pod.status.container_statuses
    assert worker.state.terminated is None and worker.state.running is None
    assert worker.state.waiting.reason == "PodInitializing"
    initialized = next(c for c in pod.status.conditions if c.type == "Initialized")
    assert initialized.status == "False"
    assert initialized.message == "containers with incomplete status: [setup late]"

    body = await read_log(admin_api, namespace=namespace, pod="init-refused", container="setup")
    assert _strip_timestamp(body) == b"no config\n"
    # A container without a planted log printed nothing.
    assert await read_log(admin_api, namespace=namespace, pod="init-refused", container="worker") == b""


async def test_succeeded_pod_exits_zero(namespace: str, admin_api: client.ApiClient) -> None:
    await _create_pod(admin_api, worker_pod(name="done", namespace=namespace, phase="Succeeded"))
    pod = await wait_for_phase(admin_api, namespace=namespace, name="done", phase="Succeeded")
    [status] = pod.status.container_statuses
    assert (status.state.terminated.exit_code, status.state.terminated.reason) == (0, "Completed")
    assert status.ready is False


async def test_log_tail_keeps_last_200_lines(
    control_plane: ControlPlane, namespace: str, admin_api: client.ApiClient
) -> None:
    content = b"".join(b"line %04d\n" % i for i in range(300))
    await plant_log(
        cluster=control_plane, namespace=namespace, pod="chatty", container="worker", content=content
    )
    await _create_pod(admin_api, worker_pod(name="chatty", namespace=namespace))
    await wait_for_phase(admin_api, namespace=namespace, name="chatty", phase="Running")

    body = await read_log(admin_api, namespace=namespace, pod="chatty", container="worker")
    lines = [_strip_timestamp(line) for line in body.splitlines()]
    assert lines == [b"line %04d" % i for i in range(100, 300)]


async def test_log_invalid_utf8_comes_back_raw(
    control_plane: ControlPlane, namespace: str, admin_api: client.ApiClient
) -> None:
    content = b"bad bytes: \xff\xfe \xc3\x28 end\n"
    await plant_log(
        cluster=control_plane, namespace=namespace, pod="binary", container="worker", content=content
    )
    await _create_pod(admin_api, worker_pod(name="binary", namespace=namespace))
    await wait_for_phase(admin_api, namespace=namespace, name="binary", phase="Running")

    body = await read_log(admin_api, namespace=namespace, pod="binary", container="worker")
    assert _strip_timestamp(body) == content  # raw, no U+FFFD replacement
    with pytest.raises(UnicodeDecodeError):
        body.decode()


async def test_log_byte_limit_keeps_oldest_end_of_tail(
    control_plane: ControlPlane, namespace: str, admin_api: client.ApiClient
) -> None:
    # 250 lines of 1 KiB: the 200-line tail (lines 50..249, ~200 KiB) exceeds 64 KiB.
    content = b"".join(b"%04d " % i + b"x" * 1018 + b"\n" for i in range(250))
    await plant_log(
        cluster=control_plane, namespace=namespace, pod="flood", container="worker", content=content
    )
    await _create_pod(admin_api, worker_pod(name="flood", namespace=namespace))
    await wait_for_phase(admin_api, namespace=namespace, name="flood", phase="Running")

    body = await read_log(admin_api, namespace=namespace, pod="flood", container="worker")
    assert len(body) == 65536
    lines = body.split(b"\n")
    assert _strip_timestamp(lines[0]).startswith(b"0050 ")  # starts at the oldest tail line
    full = [_strip_timestamp(line) for line in lines[:-1]]
    assert [line[:4] for line in full] == [b"%04d" % i for i in range(50, 50 + len(full))]
    assert len(full) == 65536 // (31 + 1024)  # 62 whole lines of 31 + 1024 bytes
    partial = lines[-1]
    assert 0 < len(partial) < 31 + 1023  # the last line is cut in the middle
    assert b"0249 " not in body  # the newest lines are the ones dropped


async def test_kwok_serves_every_log_of_bursts_planted_while_logs_are_read(
    control_plane: ControlPlane, namespace: str
) -> None:
    """kwok v0.8.0 could cache its list of Logs objects under a version its informer sets before
    the newest object is in its store: a log read in between left the newest objects unserved
    until another Logs object changed (tests/tools/binaries/_kwok/dynamic.go). Log reads during bursts of
    new Logs objects made that happen to the last objects of some bursts (not every run: it is a
    race); the kwok built here serves every one of them."""
    stop = threading.Event()

    def read_logs() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                control_plane.kwok_get(f"/containerLogs/{namespace}/nobody/worker", timeout=2)

    readers = [threading.Thread(target=read_logs) for _ in range(4)]
    for reader in readers:
        reader.start()
    try:
        for burst in range(3):
            pods = [f"burst-{burst}-{i}" for i in range(100)]
            await plant_shared_log(
                cluster=control_plane,
                namespace=namespace,
                pods=pods,
                container="worker",
                content=REFUSAL,
                timeout=20,
            )
    finally:
        stop.set()
        for reader in readers:
            reader.join()


async def test_configmap_owned_by_pod_is_garbage_collected(
    namespace: str, admin_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(admin_api)
    pod = await _create_pod(admin_api, worker_pod(name="owner", namespace=namespace))
    owner = client.V1OwnerReference(api_version="v1", kind="Pod", name="owner", uid=pod.metadata.uid)
    await core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="owned", owner_references=[owner]), data={"k": "v"}
        ),
    )
    await core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="unowned"), data={"k": "v"})
    )

    await core.delete_namespaced_pod("owner", namespace)
    await wait_for_absent(
        read=lambda: core.read_namespaced_config_map("owned", namespace), what="ConfigMap owned"
    )
    assert (await core.read_namespaced_config_map("unowned", namespace)).data == {"k": "v"}
