"""pytest fixture ``scene``: what a test that runs the operator as a process works with, in one
argument.

The end-to-end tests start the operator (``python -m agentihooks_swarm run``) on the test's
namespace, create a Swarm and Executions through the real API server, wait for what the operator
does and read what it stored in Redis. Each used to take the same five fixtures and repeat the
same moves; :class:`Scene` holds the fixtures and names the moves, so a test says only what is its
own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels
from tests.support import builders, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory
from tests.support.operator_process import OperatorProcess

__all__ = ["Scene", "scene"]

T = TypeVar("T")

GROUP, VERSION = "swarm.agentihooks.io", "v1alpha1"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scene:
    api: client.ApiClient
    """The admin's client, straight to the API server."""
    cluster: ControlPlane
    namespace: str
    """The test's own namespace, the one the operator watches."""
    operator: OperatorFactory
    redis_url: str
    """The Redis the operator runs on (a test module may override the ``redis_url`` fixture)."""

    def start(self, *, kubeconfig: Path | None = None, **kwargs: Any) -> OperatorProcess:
        """The operator, started on the test's namespace (as the admin, unless ``kubeconfig``);
        ``kwargs`` go to :class:`OperatorProcess` (``env``, ``via_kopf``...). Stopped after the test."""
        return self.operator(
            kubeconfig=kubeconfig or self.cluster.kubeconfig, namespace=self.namespace, **kwargs
        )

    async def swarm(self, *, name: str, **spec: Any) -> None:
        """Create Swarm ``name`` (see :func:`builders.swarm`)."""
        await watching.create(self.api, builders.swarm(name=name, namespace=self.namespace, **spec))

    async def execution(self, *, name: str, swarm: str, **spec: Any) -> None:
        """Create Execution ``name`` of ``swarm`` (see :func:`builders.execution`)."""
        await watching.create(
            self.api, builders.execution(name=name, namespace=self.namespace, swarm=swarm, **spec)
        )

    async def get(self, name: str) -> dict[str, Any]:
        """Execution ``name`` as the API server has it."""
        return await watching.execution(self.api, namespace=self.namespace, name=name)

    async def status(self, name: str) -> dict[str, Any]:
        """Execution ``name``'s status (empty before the operator wrote one)."""
        return await watching.status_of(self.api, self.namespace, name)

    async def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        """Execution ``name``'s condition of ``type_``, if it has one."""
        conditions = (await self.status(name)).get("conditions") or []
        return next((c for c in conditions if c.get("type") == type_), None)

    async def exists(self, name: str) -> bool:
        """Whether Execution ``name`` is still there."""
        try:
            await self.get(name)
        except client.ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    async def delete(self, name: str) -> None:
        """Delete Execution ``name`` (it goes at once: the operator puts no finalizer on it)."""
        await client.CustomObjectsApi(self.api).delete_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "executions", name
        )

    async def until(
        self,
        probe: Callable[[], Awaitable[T | None]],
        *,
        what: str,
        process: OperatorProcess | None = None,
        timeout: float = 30.0,
    ) -> T:
        """:func:`watching.eventually`: ``probe``'s first answer other than None or False."""
        return await watching.eventually(probe, what=what, operator=process, timeout=timeout)

    async def until_phase(
        self, name: str, phase: str, *, process: OperatorProcess, timeout: float = 60.0
    ) -> dict[str, Any]:
        """Execution ``name``'s status once its phase is ``phase``."""

        async def reached() -> dict[str, Any] | None:
            status = await self.status(name)
            return status if status.get("phase") == phase else None

        return await self.until(reached, what=f"{name} to be {phase}", process=process, timeout=timeout)

    async def until_gone(self, name: str, *, process: OperatorProcess, timeout: float = 60.0) -> None:
        """Wait until Execution ``name`` is gone."""

        async def gone() -> bool:
            return not await self.exists(name)

        await self.until(gone, what=f"{name} to be gone", process=process, timeout=timeout)

    async def until_cleaned_up(
        self, name: str, *, slug: str, process: OperatorProcess, timeout: float = 60.0
    ) -> Any:
        """Wait until deleted Execution ``name`` is gone, its attempt retained (``attempt-retained``
        of swarm ``slug``, returned) and its worker Pods gone: a deleted Execution goes at once,
        and its cleanup, capture first, follows while its worker Pod waits, held by its evidence
        finalizer."""
        await self.until_gone(name, process=process, timeout=timeout)

        async def cleaned_up() -> Any:
            retained = await self.stored(slug=slug, name="attempt-retained", execution=name)
            if retained is None:
                return None
            left = await client.CoreV1Api(self.api).list_namespaced_pod(
                self.namespace, label_selector=f"{labels.EXECUTION}={name}"
            )
            return None if left.items else retained

        return await self.until(
            cleaned_up, what=f"{name}'s attempt cleaned up", process=process, timeout=timeout
        )

    async def stored(self, *, slug: str, name: str, execution: str) -> Any:
        """The JSON record ``execution`` in Redis hash ``name`` of swarm ``slug``, or None."""
        return await watching.stored(self.redis_url, slug=slug, name=name, execution=execution)

    async def events_once(
        self, name: str, *, reasons: set[str], process: OperatorProcess | None = None
    ) -> list[tuple[str, str, str]]:
        """Execution ``name``'s Events once every one of ``reasons`` is among them."""
        return await watching.events_once(
            self.api, namespace=self.namespace, name=name, reasons=reasons, operator=process
        )

    async def python(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``python ARGS`` as a person runs it against the test's Redis (nothing else in its
        environment), in a thread: a read command (``-c``) or the records CLI (``-m``)."""
        return await asyncio.to_thread(
            subprocess.run,
            [sys.executable, *args],
            env={"AGENTIHOOKS_SWARM_REDIS_URL": self.redis_url, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=check,
        )


@pytest.fixture
def scene(
    namespace: str,
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    operator: OperatorFactory,
    redis_url: str,
) -> Scene:
    return Scene(
        api=admin_api, cluster=control_plane, namespace=namespace, operator=operator, redis_url=redis_url
    )
