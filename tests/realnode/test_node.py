"""The real node itself: real containers, the kubelet's answers, the Pod network and cluster DNS.

Each test notes where a real kubelet answers differently from kwok (see also
``tests/support/pods.py``), because the operator must be right for the real answer.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support import pods
from tests.support.busybox import pod
from tests.support.cluster import ControlPlane


async def run_to_end(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> Any:
    manifest: Any = body
    await client.CoreV1Api(api).create_namespaced_pod(namespace, manifest)
    name = body["metadata"]["name"]
    for phase in ("Succeeded", "Failed"):
        try:
            return await pods.wait_for_phase(api, namespace=namespace, name=name, phase=phase, timeout=60)
        except AssertionError:
            continue
    raise AssertionError(f"{name} did not finish")


@pytest.mark.pod_security("restricted")
async def test_a_real_container_fails_with_its_exit_code_and_log(
    admin_api: client.ApiClient, namespace: str
) -> None:
    done = await run_to_end(
        admin_api, namespace, pod("exit78", "echo 'worker startup refused: planted'; echo oops >&2; exit 78")
    )
    assert done.status.phase == "Failed"
    terminated = done.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (78, "Error")
    assert terminated.container_id.startswith("containerd://")
    # A real kubelet reports whole-second times and a containerd:// id; kwok's are synthetic.
    assert terminated.started_at is not None and terminated.finished_at is not None
    log = await client.CoreV1Api(admin_api).read_namespaced_pod_log(
        "exit78", namespace, container="worker", timestamps=True, tail_lines=200, limit_bytes=65536
    )
    lines = log.splitlines()
    assert {line.split(" ", 1)[1] for line in lines} == {"worker startup refused: planted", "oops"}
    # Nanosecond RFC 3339 timestamps, stdout and stderr interleaved in one stream.
    assert all(len(line.split(" ", 1)[0]) == len("2026-11-30T08:27:00.259356477Z") for line in lines)


@pytest.mark.pod_security("restricted")
async def test_a_main_container_behind_a_failed_init_container_has_no_log(
    admin_api: client.ApiClient, namespace: str
) -> None:
    done = await run_to_end(
        admin_api, namespace, pod("init3", "echo never", init="echo init failing; exit 3")
    )
    assert done.status.phase == "Failed"
    init = done.status.init_container_statuses[0].state.terminated
    assert init.exit_code == 3
    waiting = done.status.container_statuses[0].state.waiting
    assert waiting is not None and waiting.reason == "PodInitializing"
    core = client.CoreV1Api(admin_api)
    assert (
        await core.read_namespaced_pod_log("init3", namespace, container="init")
    ).strip() == "init failing"
    # kwok serves an (empty) log here; a real kubelet refuses with 400.
    with pytest.raises(ApiException) as refused:
        await core.read_namespaced_pod_log("init3", namespace, container="worker")
    assert refused.value.status == 400
    assert "is waiting to start" in str(refused.value.body)


@pytest.mark.pod_security("restricted")
async def test_a_memory_limit_kills_with_oomkilled(admin_api: client.ApiClient, namespace: str) -> None:
    # dd's one 64 MiB block does not fit in 16 MiB: the kernel kills it (exit 137, OOMKilled).
    done = await run_to_end(
        admin_api,
        namespace,
        pod("oom", "echo allocating; exec dd if=/dev/zero of=/dev/null bs=64M count=4", memory="16Mi"),
    )
    terminated = done.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (137, "OOMKilled")


async def test_pods_reach_the_api_server_by_service_and_names_resolve_in_the_cluster_only(
    admin_api: client.ApiClient, namespace: str
) -> None:
    script = (
        "nslookup kubernetes.default.svc.cluster.local && "
        "nc -w 3 kubernetes.default.svc.cluster.local 443 </dev/null && echo SERVICE-REACHED; "
        "nslookup example.com || echo OUTSIDE-NOT-RESOLVED"
    )
    done = await run_to_end(admin_api, namespace, pod("net", script))
    log = await client.CoreV1Api(admin_api).read_namespaced_pod_log("net", namespace)
    assert done.status.phase == "Succeeded", log
    assert "Address: 10.96.0.1" in log
    assert "SERVICE-REACHED" in log
    assert "OUTSIDE-NOT-RESOLVED" in log  # CoreDNS has no forward: nothing leaves the machine


def test_the_node_is_real(control_plane: ControlPlane) -> None:
    node = control_plane.request_json("GET", f"/api/v1/nodes/{control_plane.node_name}")
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.37.2"
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == "10.254.254.1"
