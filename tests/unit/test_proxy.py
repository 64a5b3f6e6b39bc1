"""FaultProxy against a tiny local aiohttp upstream (plain HTTP)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.support.proxy import (
    Call,
    Delay,
    FaultProxy,
    Respond,
    WatchError,
    kubernetes_status,
)

PODS = "/api/v1/namespaces/default/pods"


@dataclass
class Upstream:
    url: str
    seen: list[dict[str, Any]] = field(default_factory=list)
    release_stream: asyncio.Event = field(default_factory=asyncio.Event)
    stream_finished: asyncio.Event = field(default_factory=asyncio.Event)


async def _start_upstream() -> tuple[Upstream, web.AppRunner]:
    upstream = Upstream(url="")

    async def record(request: web.Request) -> dict[str, Any]:
        body = await request.read()
        entry = {
            "method": request.method,
            "path": request.path,
            "query": request.query_string,
            "headers": dict(request.headers),
            "body": body.decode(),
        }
        upstream.seen.append(entry)
        return entry

    async def echo(request: web.Request) -> web.Response:
        entry = await record(request)
        return web.json_response(entry, headers={"X-Upstream": "yes", "Keep-Alive": "timeout=5"})

    async def stream(request: web.Request) -> web.StreamResponse:
        await record(request)
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b'{"type":"ADDED"}\n')
        await upstream.release_stream.wait()
        with contextlib.suppress(ConnectionResetError):  # the proxy may have cut the stream
            await response.write(b'{"type":"MODIFIED"}\n')
            await response.write_eof()
        upstream.stream_finished.set()
        return response

    async def cut(request: web.Request) -> web.StreamResponse:
        await record(request)
        response = web.StreamResponse(status=200)
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b'{"type":"ADDED"}\n')
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()  # the upstream dies mid-watch
        return response

    app = web.Application()
    app.router.add_route("GET", "/stream", stream)
    app.router.add_route("GET", "/cut", cut)
    app.router.add_route("*", "/{tail:.*}", echo)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    upstream.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    return upstream, runner


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    server, runner = await _start_upstream()
    try:
        yield server
    finally:
        await runner.cleanup()


@pytest.fixture
async def proxy(upstream: Upstream) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(upstream=upstream.url) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_pass_through_method_path_query_headers_body(
    upstream: Upstream, proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    async with client.post(
        f"{proxy.url}{PODS}?dryRun=All&fieldManager=test",
        data=b'{"metadata":{"name":"p1"}}',
        headers={
            "Authorization": "Bearer secret-token",
            "Content-Type": "application/json",
            "Connection": "keep-alive, X-Hop",
            "X-Hop": "must-not-pass",
            "X-Custom": "passes",
        },
    ) as response:
        assert response.status == 200
        assert response.headers["X-Upstream"] == "yes"
        assert "Keep-Alive" not in response.headers
        echoed = await response.json()

    assert echoed["method"] == "POST"
    assert echoed["path"] == PODS
    assert echoed["query"] == "dryRun=All&fieldManager=test"
    assert echoed["body"] == '{"metadata":{"name":"p1"}}'
    headers = echoed["headers"]
    assert headers["Authorization"] == "Bearer secret-token"
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Custom"] == "passes"
    assert "X-Hop" not in headers
    assert headers["Host"] == upstream.url.removeprefix("http://")
    assert headers["Content-Length"] == str(len(b'{"metadata":{"name":"p1"}}'))
    assert proxy.calls() == [Call("POST", PODS, "dryRun=All&fieldManager=test")]


async def test_status_injection_times_then_pass_through(
    upstream: Upstream, proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    rule = proxy.fail(method="GET", path=PODS, status=429, times=2, retry_after=3)
    statuses: list[int] = []
    bodies: list[dict[str, Any]] = []
    for _ in range(3):
        async with client.get(f"{proxy.url}{PODS}") as response:
            statuses.append(response.status)
            bodies.append(await response.json())
            if response.status == 429:
                assert response.headers["Retry-After"] == "3"
                assert response.headers["Content-Type"] == "application/json"
    assert statuses == [429, 429, 200]
    assert bodies[0] == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Too many requests, please try again later.",
        "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": 3},
        "code": 429,
    }
    assert bodies[2]["path"] == PODS
    assert len(upstream.seen) == 1
    assert rule.hits == 2
    assert rule.remaining == 0
    assert proxy.count(method="GET", path=PODS) == 3


@pytest.mark.parametrize(
    ("status", "method", "path", "reason", "message"),
    [
        (
            403,
            "GET",
            PODS,
            "Forbidden",
            'pods is forbidden: User "system:serviceaccount:test:proxy" cannot list resource "pods" '
            'in API group "" in the namespace "default"',
        ),
        (404, "GET", f"{PODS}/p1", "NotFound", 'pods "p1" not found'),
        (
            409,
            "PUT",
            "/apis/apps/v1/namespaces/ns/deployments/d1",
            "Conflict",
            'Operation cannot be fulfilled on deployments.apps "d1": the object has been modified; '
            "please apply your changes to the latest version and try again",
        ),
        (500, "DELETE", f"{PODS}/p1", "InternalError", "Internal error occurred: injected by the test proxy"),
        (
            503,
            "GET",
            "/version",
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
    ],
)
async def test_status_bodies_look_like_kube_apiserver(
    proxy: FaultProxy,
    client: aiohttp.ClientSession,
    status: int,
    method: str,
    path: str,
    reason: str,
    message: str,
) -> None:
    proxy.fail(status=status, path=path, method=method, times=None)
    async with client.request(method, f"{proxy.url}{path}") as response:
        assert response.status == status
        assert "Retry-After" not in response.headers
        body = await response.json()
    assert body["kind"] == "Status"
    assert body["status"] == "Failure"
    assert body["code"] == status
    assert body["reason"] == reason
    assert body["message"] == message


async def test_conflict_on_create_is_already_exists_with_name_from_body(
    proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    proxy.fail(method="POST", path=PODS, status=409)
    async with client.post(f"{proxy.url}{PODS}", json={"metadata": {"name": "w-1"}}) as response:
        assert response.status == 409
        body = await response.json()
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'pods "w-1" already exists'
    assert body["details"] == {"name": "w-1", "kind": "pods"}


async def test_query_matching_only_hits_watches(
    upstream: Upstream, proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    proxy.fail(method="GET", path=PODS, query=r"(^|&)watch=true(&|$)", status=503, times=None)
    async with client.get(f"{proxy.url}{PODS}?limit=500") as response:
        assert response.status == 200
    async with client.get(f"{proxy.url}{PODS}?resourceVersion=5&watch=true") as response:
        assert response.status == 503
    async with client.get(f"{proxy.url}{PODS}?watch=true&timeoutSeconds=3") as response:
        assert response.status == 503
    assert [entry["query"] for entry in upstream.seen] == ["limit=500"]
    assert proxy.count(path=PODS, query="watch=true") == 2
    assert proxy.count(path=PODS) == 3


async def test_first_matching_rule_wins_and_rules_are_removable(
    proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    first = proxy.fail(path=r"/api/v1/.*", status=500, times=None)
    proxy.fail(path=PODS, status=403, times=None)

    async def status() -> int:
        async with client.get(f"{proxy.url}{PODS}") as response:
            await response.read()
            return response.status

    assert await status() == 500
    proxy.remove_rule(first)
    assert await status() == 403
    proxy.clear_rules()
    assert await status() == 200
    assert proxy.rules() == []


async def test_custom_respond_body_and_headers(proxy: FaultProxy, client: aiohttp.ClientSession) -> None:
    proxy.add_rule(
        path="/healthz",
        action=Respond(status=500, body=b"etcd not ok", headers={"Content-Type": "text/plain"}),
        times=1,
    )
    async with client.get(f"{proxy.url}/healthz") as response:
        assert response.status == 500
        assert response.headers["Content-Type"] == "text/plain"
        assert await response.text() == "etcd not ok"


async def test_delay_past_client_timeout_gives_timeout_error(
    upstream: Upstream, proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    proxy.delay(path=PODS, seconds=5.0, times=1)
    with pytest.raises(TimeoutError):
        async with client.get(f"{proxy.url}{PODS}", timeout=aiohttp.ClientTimeout(total=0.3)) as response:
            await response.read()
    # The client gave up, its handler was cancelled: the upstream never saw it.
    async with client.get(f"{proxy.url}{PODS}") as response:
        assert response.status == 200
    assert len(upstream.seen) == 1
    assert proxy.count(path=PODS) == 2


async def test_short_delay_then_forward(
    upstream: Upstream, proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    proxy.add_rule(path=PODS, action=Delay(seconds=0.2), times=1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with client.get(f"{proxy.url}{PODS}") as response:
        assert response.status == 200
    assert loop.time() - started >= 0.2
    assert len(upstream.seen) == 1


async def test_delayed_response_after_forward_reaches_upstream(
    upstream: Upstream, proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    proxy.delay(method="POST", path=PODS, seconds=5.0, after_forward=True)
    with pytest.raises(TimeoutError):
        async with client.post(
            f"{proxy.url}{PODS}", json={"metadata": {"name": "x"}}, timeout=aiohttp.ClientTimeout(total=0.5)
        ) as response:
            await response.read()
    assert [entry["method"] for entry in upstream.seen] == ["POST"]


async def test_hang_until_client_gives_up(proxy: FaultProxy, client: aiohttp.ClientSession) -> None:
    proxy.hang(path=PODS, times=None)
    with pytest.raises(TimeoutError):
        async with client.get(f"{proxy.url}{PODS}", timeout=aiohttp.ClientTimeout(total=0.3)) as response:
            await response.read()


async def test_reset_gives_client_connection_error(
    upstream: Upstream, proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    proxy.reset(method="POST", path=PODS, times=1)
    with pytest.raises(aiohttp.ClientConnectionError):
        async with client.post(f"{proxy.url}{PODS}", json={}) as response:
            await response.read()
    assert upstream.seen == []
    async with client.post(f"{proxy.url}{PODS}", json={}) as response:
        assert response.status == 200
    assert len(upstream.seen) == 1
    assert proxy.count(method="POST", path=PODS) == 2


async def test_aiohttp_retries_an_idempotent_request_once_after_a_reset(
    upstream: Upstream, proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    # aiohttp (and so kubernetes-asyncio) silently resends a GET once after a disconnect:
    # one reset is invisible to the caller, two are not.
    proxy.reset(method="GET", path=PODS, times=1)
    async with client.get(f"{proxy.url}{PODS}") as response:
        assert response.status == 200
    assert proxy.count(method="GET", path=PODS) == 2
    assert len(upstream.seen) == 1

    proxy.reset_counts()
    proxy.reset(method="GET", path=PODS, times=2)
    with pytest.raises(aiohttp.ClientConnectionError):
        async with client.get(f"{proxy.url}{PODS}") as response:
            await response.read()
    assert proxy.count(method="GET", path=PODS) == 2
    assert len(upstream.seen) == 1


async def test_reset_after_forward_loses_the_reply_only(
    upstream: Upstream, proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    proxy.reset(method="POST", path=PODS, after_forward=True)
    with pytest.raises(aiohttp.ClientConnectionError):
        async with client.post(f"{proxy.url}{PODS}", json={"metadata": {"name": "lost"}}) as response:
            await response.read()
    assert [(entry["method"], json.loads(entry["body"])) for entry in upstream.seen] == [
        ("POST", {"metadata": {"name": "lost"}})
    ]


async def test_streaming_passes_chunks_before_upstream_finishes(
    upstream: Upstream, proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    async with client.get(f"{proxy.url}/stream?watch=true") as response:
        assert response.status == 200
        first = await asyncio.wait_for(response.content.readline(), timeout=5)
        assert first == b'{"type":"ADDED"}\n'
        assert not upstream.stream_finished.is_set()
        upstream.release_stream.set()
        second = await asyncio.wait_for(response.content.readline(), timeout=5)
        assert second == b'{"type":"MODIFIED"}\n'
        assert await asyncio.wait_for(response.content.read(), timeout=5) == b""
    assert upstream.stream_finished.is_set()
    assert proxy.calls() == [Call("GET", "/stream", "watch=true")]


async def test_upstream_breaking_off_mid_stream_breaks_the_client_stream(
    proxy: FaultProxy, client: aiohttp.ClientSession
) -> None:
    async with client.get(f"{proxy.url}/cut?watch=true") as response:
        assert response.status == 200
        assert await asyncio.wait_for(response.content.readline(), timeout=5) == b'{"type":"ADDED"}\n'
        with pytest.raises(aiohttp.ClientPayloadError):
            await asyncio.wait_for(response.content.read(), timeout=5)


async def test_stop_cuts_open_streams(upstream: Upstream, client: aiohttp.ClientSession) -> None:
    proxy = FaultProxy(upstream=upstream.url)
    await proxy.start()
    try:
        async with client.get(f"{proxy.url}/stream?watch=true") as response:
            assert await asyncio.wait_for(response.content.readline(), timeout=5) == b'{"type":"ADDED"}\n'
            await asyncio.wait_for(proxy.stop(), timeout=5)
            with pytest.raises(aiohttp.ClientPayloadError):
                await asyncio.wait_for(response.content.read(), timeout=5)
    finally:
        await proxy.stop()
        upstream.release_stream.set()


async def test_watch_error_event(proxy: FaultProxy, client: aiohttp.ClientSession) -> None:
    proxy.add_rule(path=PODS, query="watch=true", action=WatchError(), times=1)
    async with client.get(f"{proxy.url}{PODS}?watch=true") as response:
        assert response.status == 200
        lines = (await response.read()).splitlines()
    assert [json.loads(line) for line in lines] == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "too old resource version: 1 (2)",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]


async def test_counting_is_exact_and_resettable(proxy: FaultProxy, client: aiohttp.ClientSession) -> None:
    requests = [
        ("GET", PODS, ""),
        ("GET", f"{PODS}/a", ""),
        ("DELETE", f"{PODS}/a", "gracePeriodSeconds=0"),
        ("PATCH", f"{PODS}/b", ""),
        ("GET", PODS, "labelSelector=app=x&watch=true"),
    ]
    for method, path, query in requests:
        url = f"{proxy.url}{path}" + (f"?{query}" if query else "")
        async with client.request(method, url) as response:
            await response.read()
    assert proxy.calls() == [Call(*request) for request in requests]
    assert proxy.count() == 5
    assert proxy.count(method="GET") == 3
    assert proxy.count(method="get", path=PODS) == 2
    assert proxy.count(path=rf"{PODS}/[^/]+") == 3
    assert proxy.count(method="DELETE", path=rf"{PODS}/a") == 1
    assert proxy.count(query=r"labelSelector=app=x") == 1
    assert proxy.count(method="POST") == 0
    assert await proxy.wait_for_count(method="PATCH", at_least=1, timeout=1) == 1
    with pytest.raises(TimeoutError):
        await proxy.wait_for_count(method="POST", timeout=0.1)
    proxy.reset_counts()
    assert proxy.calls() == []
    assert proxy.count() == 0


async def test_unreachable_upstream_gives_503(client: aiohttp.ClientSession) -> None:
    from tests.support.redis_server import free_port

    proxy = FaultProxy(upstream=f"http://127.0.0.1:{free_port()}")
    async with proxy, client.get(f"{proxy.url}{PODS}") as response:
        assert response.status == 503
        body = await response.json()
    assert body["reason"] == "ServiceUnavailable"
    assert body["message"].startswith("fault proxy: upstream unreachable")


def _sync_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


async def test_threaded_proxy_serves_sync_clients(upstream: Upstream) -> None:
    # The upstream lives in this loop, so the sync client must run in a worker thread.
    with FaultProxy(upstream=upstream.url) as proxy:
        proxy.fail(path=PODS, status=404, times=1)
        first = await asyncio.to_thread(_sync_get, f"{proxy.url}{PODS}")
        second = await asyncio.to_thread(_sync_get, f"{proxy.url}{PODS}")
        assert first[0] == 404
        assert json.loads(first[1])["reason"] == "NotFound"
        assert second[0] == 200
        assert proxy.count(path=PODS) == 2
        port = proxy.port
    # Stopped: the port refuses connections.
    with pytest.raises(urllib.error.URLError):
        await asyncio.to_thread(_sync_get, f"http://127.0.0.1:{port}{PODS}")


async def test_restart_keeps_the_port(upstream: Upstream, client: aiohttp.ClientSession) -> None:
    proxy = FaultProxy(upstream=upstream.url)
    async with proxy:
        port = proxy.port
    async with proxy:
        assert proxy.port == port
        async with client.get(f"{proxy.url}{PODS}") as response:
            assert response.status == 200


def test_kubeconfig(tmp_path: Path) -> None:
    proxy = FaultProxy(upstream="https://127.0.0.1:6443")
    proxy._port = 12345  # not started: only the address matters here
    path = proxy.kubeconfig(token="tok-1", path=tmp_path / "kube" / "config")
    assert path == tmp_path / "kube" / "config"
    config = json.loads(path.read_text())
    assert config["clusters"] == [{"name": "fault-proxy", "cluster": {"server": "http://127.0.0.1:12345"}}]
    assert config["users"] == [{"name": "fault-proxy", "user": {"token": "tok-1"}}]
    assert config["current-context"] == "fault-proxy"
    assert path.stat().st_mode & 0o777 == 0o600


def test_kubernetes_status_for_forbidden_cluster_scoped_get() -> None:
    status = kubernetes_status(
        code=403, method="GET", path="/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x"
    )
    assert status["message"] == (
        'customresourcedefinitions.apiextensions.k8s.io "x" is forbidden: User '
        '"system:serviceaccount:test:proxy" cannot get resource "customresourcedefinitions" '
        'in API group "apiextensions.k8s.io"'
    )
    assert status["details"] == {
        "name": "x",
        "group": "apiextensions.k8s.io",
        "kind": "customresourcedefinitions",
    }


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_pki(directory: Path) -> Path:
    """A CA and a serving certificate for 127.0.0.1 (server.crt/server.key), made with openssl."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=ca",
        cwd=directory,
    )
    _openssl(
        "req", "-x509", *ec, "-CA", "ca.crt", "-CAkey", "ca.key", "-days", "2",
        "-keyout", "server.key", "-out", "server.crt", "-subj", "/CN=server",
        "-addext", "subjectAltName=IP:127.0.0.1", "-addext", "extendedKeyUsage=serverAuth",
        cwd=directory,
    )  # fmt: skip
    return directory


async def test_https_upstream_verified_and_https_listener(tmp_path: Path) -> None:
    pki = _make_pki(tmp_path / "pki")
    other = _make_pki(tmp_path / "other")

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"auth": request.headers.get("Authorization")})

    app = web.Application()
    app.router.add_get("/version", hello)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    upstream_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    upstream_ssl.load_cert_chain(str(pki / "server.crt"), str(pki / "server.key"))
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=upstream_ssl).start()
    upstream = f"https://127.0.0.1:{runner.addresses[0][1]}"
    client_ssl = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    try:
        proxy = FaultProxy(
            upstream=upstream,
            ca_file=pki / "ca.crt",
            tls_cert_file=pki / "server.crt",
            tls_key_file=pki / "server.key",
            tls_ca_file=pki / "ca.crt",
        )
        async with proxy, aiohttp.ClientSession() as session:
            assert proxy.url.startswith("https://127.0.0.1:")
            async with session.get(
                f"{proxy.url}/version", headers={"Authorization": "Bearer t"}, ssl=client_ssl
            ) as response:
                assert response.status == 200
                assert await response.json() == {"auth": "Bearer t"}
            config = json.loads(proxy.kubeconfig(token="t", path=tmp_path / "kc").read_text())
            assert config["clusters"][0]["cluster"] == {
                "server": proxy.url,
                "certificate-authority": str(pki / "ca.crt"),
            }

        # An upstream whose certificate the proxy's CA did not sign is unreachable: 503.
        async with FaultProxy(upstream=upstream, ca_file=other / "ca.crt") as wrong_ca:
            async with aiohttp.ClientSession() as session, session.get(f"{wrong_ca.url}/version") as response:
                assert response.status == 503
                body = await response.json()
            assert "certificate" in body["message"].lower()
    finally:
        await runner.cleanup()
