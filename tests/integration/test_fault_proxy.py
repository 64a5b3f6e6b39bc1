"""The fault proxy in front of the real kube-apiserver, seen by kubernetes-asyncio."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support.cluster import ControlPlane
from tests.support.fixtures_services import ControlPlaneLike
from tests.support.proxy import WATCH_QUERY, FaultProxy, WatchError

pytestmark = pytest.mark.integration

NAMESPACE = "default"
CONFIGMAPS = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


@pytest.fixture
async def api(
    fault_proxy: FaultProxy, control_plane: ControlPlaneLike, tmp_path: Path
) -> AsyncIterator[client.ApiClient]:
    """A kubernetes-asyncio client configured from the proxy's kubeconfig (bearer token, plain HTTP)."""
    kubeconfig = fault_proxy.kubeconfig(token=control_plane.admin_token, path=tmp_path / "kubeconfig")
    api_client: client.ApiClient = await config.new_client_from_config(config_file=str(kubeconfig))
    async with api_client:
        yield api_client


def _status(exc: ApiException) -> dict[str, Any]:
    assert exc.body is not None
    status: dict[str, Any] = json.loads(exc.body)
    assert status["kind"] == "Status"
    assert status["code"] == exc.status
    return status


def _configmap(name: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"k": "v"})


async def test_pass_through_list_pods_with_bearer_token(
    fault_proxy: FaultProxy, api: client.ApiClient
) -> None:
    pods = await client.CoreV1Api(api).list_namespaced_pod(NAMESPACE)
    assert isinstance(pods, client.V1PodList)
    assert pods.metadata.resource_version
    assert fault_proxy.calls() == [("GET", PODS, "")]


async def test_bad_token_is_rejected_by_the_real_server(fault_proxy: FaultProxy, tmp_path: Path) -> None:
    kubeconfig = fault_proxy.kubeconfig(token="not-a-valid-token", path=tmp_path / "bad")
    api_client: client.ApiClient = await config.new_client_from_config(config_file=str(kubeconfig))
    async with api_client:
        with pytest.raises(ApiException) as caught:
            await client.CoreV1Api(api_client).list_namespaced_pod(NAMESPACE)
    assert caught.value.status == 401
    assert fault_proxy.count(method="GET", path=PODS) == 1


async def test_injected_429_reaches_the_client_then_passes(
    fault_proxy: FaultProxy, api: client.ApiClient
) -> None:
    fault_proxy.fail(method="GET", path=PODS, status=429, times=1, retry_after=2)
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as caught:
        await core.list_namespaced_pod(NAMESPACE)
    assert caught.value.status == 429
    assert caught.value.reason == "Too Many Requests"
    assert caught.value.headers is not None
    assert caught.value.headers["Retry-After"] == "2"
    assert _status(caught.value)["reason"] == "TooManyRequests"
    assert _status(caught.value)["details"] == {"retryAfterSeconds": 2}
    pods = await core.list_namespaced_pod(NAMESPACE)
    assert isinstance(pods, client.V1PodList)
    assert fault_proxy.count(method="GET", path=PODS) == 2


async def test_injected_403_reaches_the_client(fault_proxy: FaultProxy, api: client.ApiClient) -> None:
    fault_proxy.fail(method="POST", path=CONFIGMAPS, status=403, times=None)
    name = f"fp-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            await core.create_namespaced_config_map(NAMESPACE, _configmap(name))
        assert caught.value.status == 403
        assert _status(caught.value)["reason"] == "Forbidden"
    # Nothing reached the server.
    with pytest.raises(ApiException) as missing:
        await core.read_namespaced_config_map(name, NAMESPACE)
    assert missing.value.status == 404
    assert fault_proxy.count(method="POST", path=CONFIGMAPS) == 2
    assert fault_proxy.count(method="GET", path=f"{CONFIGMAPS}/{name}") == 1


async def test_lost_reply_after_forward_still_creates_the_object(
    fault_proxy: FaultProxy, api: client.ApiClient
) -> None:
    fault_proxy.reset(method="POST", path=CONFIGMAPS, after_forward=True, times=1)
    name = f"fp-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    # POST is not idempotent: aiohttp does not resend it, the caller sees the broken connection.
    with pytest.raises(aiohttp.ClientConnectionError):
        await core.create_namespaced_config_map(NAMESPACE, _configmap(name))
    try:
        created = await core.read_namespaced_config_map(name, NAMESPACE)
        assert created.data == {"k": "v"}
        with pytest.raises(ApiException) as again:
            await core.create_namespaced_config_map(NAMESPACE, _configmap(name))
        assert again.value.status == 409
    finally:
        await core.delete_namespaced_config_map(name, NAMESPACE)


async def test_watch_through_the_proxy_delivers_added(fault_proxy: FaultProxy, api: client.ApiClient) -> None:
    name = f"fp-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    events: list[dict[str, Any]] = []

    async def watch_one() -> None:
        async with watch.Watch() as stream:
            async for event in stream.stream(
                core.list_namespaced_config_map,
                NAMESPACE,
                field_selector=f"metadata.name={name}",
                timeout_seconds=60,
            ):
                events.append(event)
                return

    watcher = asyncio.create_task(watch_one())
    try:
        await fault_proxy.wait_for_count(method="GET", path=CONFIGMAPS, query=WATCH_QUERY, timeout=10)
        await core.create_namespaced_config_map(NAMESPACE, _configmap(name))
        await asyncio.wait_for(watcher, timeout=30)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        with contextlib.suppress(ApiException):
            await core.delete_namespaced_config_map(name, NAMESPACE)
    assert [(event["type"], event["object"].metadata.name) for event in events] == [("ADDED", name)]
    assert fault_proxy.count(method="GET", path=CONFIGMAPS, query=WATCH_QUERY) == 1
    assert fault_proxy.count(method="POST", path=CONFIGMAPS) == 1


async def test_watch_error_410_reaches_the_client(fault_proxy: FaultProxy, api: client.ApiClient) -> None:
    fault_proxy.add_rule(method="GET", path=CONFIGMAPS, query=WATCH_QUERY, action=WatchError(), times=1)
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as caught:
        async with watch.Watch() as stream:
            async for _ in stream.stream(core.list_namespaced_config_map, NAMESPACE, timeout_seconds=5):
                pass
    assert caught.value.status == 410
    assert fault_proxy.count(method="GET", path=CONFIGMAPS, query=WATCH_QUERY) == 1


def _kubectl(bin_dir: Path, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "--request-timeout=20s", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_kubectl_subprocess_through_the_threaded_tls_proxy(
    threaded_tls_fault_proxy: FaultProxy, control_plane: ControlPlane, tmp_path: Path
) -> None:
    proxy = threaded_tls_fault_proxy
    kubeconfig = proxy.kubeconfig(token=control_plane.admin_token, path=tmp_path / "kubeconfig")
    proxy.fail(method="GET", path="/api/v1/namespaces", status=403, times=None)
    denied = _kubectl(control_plane.bin_dir, kubeconfig, "get", "namespaces", "-o", "name")
    assert denied.returncode == 1
    assert (
        'Error from server (Forbidden): namespaces is forbidden: User "system:serviceaccount:test:proxy" '
        'cannot list resource "namespaces" in API group ""'
    ) in denied.stderr, denied.stderr
    assert proxy.count(method="GET", path="/api/v1/namespaces") == 1

    proxy.clear_rules()
    proxy.reset_counts()
    listed = _kubectl(control_plane.bin_dir, kubeconfig, "get", "namespaces", "-o", "name")
    assert listed.returncode == 0, listed.stderr
    assert "namespace/default" in listed.stdout.split()
    assert proxy.count(method="GET", path="/api/v1/namespaces") == 1


def test_kubectl_sends_no_token_over_plain_http(
    threaded_fault_proxy: FaultProxy, fault_proxy_kubeconfig: Path, control_plane: ControlPlane
) -> None:
    # Why the TLS variant exists: client-go drops the bearer token for an http:// server.
    result = _kubectl(control_plane.bin_dir, fault_proxy_kubeconfig, "get", "--raw", "/api")
    assert result.returncode == 1
    assert 'User "system:anonymous" cannot get path "/api"' in result.stderr
    assert threaded_fault_proxy.calls() == [("GET", "/api", "timeout=20s")]
