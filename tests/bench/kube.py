"""The bench's own Kubernetes traffic: plain aiohttp straight to kube-apiserver, never the proxy.

The operator's requests go through the fault proxy, which counts them; the bench's (planting,
creating Executions, watching Pods and Executions) go directly to the API server so they are
not counted. Watches are parsed as raw JSON lines, without kubernetes-asyncio's models, to keep
the bench's own CPU use small on a 2-core machine where it shares the CPU with what it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import aiohttp

from tests.support.cluster import ControlPlane

JSON = dict[str, Any]


class ApiError(RuntimeError):
    """The API server answered something the bench did not expect."""


class Api:
    """An admin client (the control plane's static bearer token) on one aiohttp session."""

    def __init__(self, cluster: ControlPlane, *, connections: int = 32) -> None:
        self._server = cluster.server
        self._ssl = ssl.create_default_context(cafile=str(cluster.ca_file))
        self._token = cluster.admin_token
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._connections),
            headers={"Authorization": f"Bearer {self._token}", "Accept": "application/json"},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            read_bufsize=4 * 1024 * 1024,  # one watch event per line; Pods with status are a few KiB
        )
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use `async with Api(...)`")
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        ok: Iterable[int] = (200, 201),
        content_type: str = "application/json",
        attempts: int = 8,
        timeout: float = 30.0,
    ) -> JSON:
        """One request, retried on 429/5xx and connection errors (bounded); raises on other answers."""
        allowed = set(ok)
        headers = {"Content-Type": content_type} if body is not None else {}
        payload = json.dumps(body).encode() if body is not None else None
        last = ""
        for attempt in range(attempts):
            try:
                async with self.session.request(
                    method,
                    self._server + path,
                    data=payload,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=timeout),
                ) as response:
                    data = await response.read()
                    if response.status in allowed:
                        return json.loads(data) if data else {}
                    last = f"{response.status} {data[:500].decode(errors='replace')}"
                    if response.status != 429 and response.status < 500:
                        break
            except (aiohttp.ClientError, TimeoutError) as error:
                last = f"{type(error).__name__}: {error}"
            await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
        raise ApiError(f"{method} {path}: {last}")

    async def watch(self, path: str, *, resource_version: str) -> AsyncIterator[tuple[float, JSON]]:
        """``(time.time() on arrival, event)`` for one watch stream, until the server ends it."""
        query = f"?watch=1&resourceVersion={resource_version}&timeoutSeconds=3600"
        async with self.session.get(self._server + path + query) as response:
            if response.status != 200:
                raise ApiError(f"watch {path}: {response.status} {(await response.read())[:500]!r}")
            async for line in response.content:
                if line.strip():
                    yield time.time(), json.loads(line)


async def bounded(
    count: int, limit: int, make: Callable[[int], Awaitable[None]], *, at: list[float] | None = None
) -> None:
    """Run ``make(0..count-1)`` with at most ``limit`` in flight; ``at[i]`` gets each start time."""
    gate = asyncio.Semaphore(limit)

    async def one(index: int) -> None:
        async with gate:
            if at is not None:
                at[index] = time.time()
            await make(index)

    await asyncio.gather(*(one(i) for i in range(count)))


@dataclass
class PodSeen:
    """What the bench saw of one Pod on its watch (times are ``time.time()`` on arrival)."""

    failed_at: float | None = None
    finished_at: str | None = None
    deleted_at: float | None = None


@dataclass
class Observer:
    """Watches the run's namespace: when each Pod went Failed and went away, each Execution Done."""

    api: Api
    namespace: str
    pods: dict[str, PodSeen] = field(default_factory=dict)
    done: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        for plural, prefix, handle in (
            ("pods", "/api/v1", self._pod),
            ("executions", "/apis/swarm.agentihooks.io/v1alpha1", self._execution),
        ):
            path = f"{prefix}/namespaces/{self.namespace}/{plural}"
            listed = await self.api.request("GET", path)
            for item in listed.get("items") or []:
                handle(time.time(), "ADDED", item)
            version = str(listed["metadata"]["resourceVersion"])
            self._tasks.append(asyncio.create_task(self._follow(path, version, handle), name=f"watch {path}"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _follow(self, path: str, version: str, handle: Callable[[float, str, JSON], None]) -> None:
        for _ in range(20):  # A watch the server ends is resumed; bounded, like everything here.
            try:
                async for at, event in self.api.watch(path, resource_version=version):
                    kind, item = str(event.get("type")), event.get("object") or {}
                    if kind == "ERROR":
                        raise ApiError(f"watch {path}: {item}")
                    version = str(item.get("metadata", {}).get("resourceVersion") or version)
                    handle(at, kind, item)
            except (ApiError, aiohttp.ClientError, ValueError) as error:
                self.errors.append(f"{path}: {error}")
                listed = await self.api.request("GET", path)
                version = str(listed["metadata"]["resourceVersion"])
                await asyncio.sleep(0.5)

    def _pod(self, at: float, kind: str, pod: JSON) -> None:
        name = str(pod.get("metadata", {}).get("name"))
        seen = self.pods.setdefault(name, PodSeen())
        if kind == "DELETED":
            seen.deleted_at = seen.deleted_at or at
            return
        status = pod.get("status") or {}
        if status.get("phase") == "Failed" and seen.failed_at is None:
            seen.failed_at = at
            for container in status.get("containerStatuses") or []:
                finished = ((container.get("state") or {}).get("terminated") or {}).get("finishedAt")
                seen.finished_at = seen.finished_at or finished

    def _execution(self, at: float, kind: str, execution: JSON) -> None:
        name = str(execution.get("metadata", {}).get("name"))
        if kind != "DELETED" and (execution.get("status") or {}).get("phase") == "Done":
            self.done.setdefault(name, at)

    def gone(self, names: Iterable[str]) -> int:
        return sum(1 for n in names if (seen := self.pods.get(n)) is not None and seen.deleted_at is not None)
