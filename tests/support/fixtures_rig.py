"""pytest fixture ``rig``: what an in-process test of one step works with, in one argument.

The integration tests run the operator's launch, capture and cleanup code in the test's own event
loop against the real API server (through the fault proxy) and the real Redis. Each used to take
the same seven fixtures and repeat the same few moves (plant a refused worker, open a runtime on
the proxy, run launch removal, read the capture); :class:`Rig` holds the fixtures and names the
moves, so a test says only what is its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import records
from agentihooks_swarm.controller import executions
from agentihooks_swarm.lifecycle import events, launch, model, step
from agentihooks_swarm.storage import operations
from tests.support import builders, cleanup_passes, pods, rbac, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import RuntimeFactory
from tests.support.planting import SLUG, attempt_for, owner, plant_pod, remove
from tests.support.proxy import FaultProxy, Rule

__all__ = ["Rig", "rig"]


@dataclasses.dataclass(frozen=True)
class Rig:
    api: client.ApiClient
    """The admin's client, straight to the API server (planting and checking, never the code under test)."""
    cluster: ControlPlane
    namespace: str
    """The test's own namespace."""
    proxy: FaultProxy
    """The fault proxy in front of the API server, in the test's event loop."""
    kubeconfig: Path
    """The admin's kubeconfig through :attr:`proxy`: what the code under test uses by default."""
    runtime_for: RuntimeFactory
    store: operations.AsyncStore
    """The operator's store on the test's empty Redis."""
    tmp_path: Path

    async def attempt(self, *, execution: str = "e1", generation: int = 1) -> model.Attempt:
        """An attempt of the ``proof`` Swarm in this namespace, owned by Execution ``execution``
        (made now, if there is none): the Pods :meth:`plant` plants are its own."""
        uid = await owner(self.api, namespace=self.namespace, execution=execution)
        return attempt_for(self.namespace, execution=execution, generation=generation, owner_uid=uid)

    async def running_execution(self, name: str, *, terminal_port: int | None = None) -> model.Attempt:
        """A Swarm whose workers kwok runs for ten minutes, and Execution ``name`` of it: its attempt."""
        runs = pods.protocol_annotations(phase="Running", run_for="10m")
        swarm = builders.swarm(
            name=SLUG, namespace=self.namespace, annotations=runs, terminal_port=terminal_port
        )
        await watching.create(self.api, swarm)
        await watching.create(self.api, builders.execution(name=name, namespace=self.namespace, swarm=SLUG))
        return await self.attempt(execution=name)

    async def tracked(self, name: str) -> model.Tracked:
        """Execution ``name`` as the operator's table tracks it, read now."""
        found = executions.track(await watching.execution(self.api, namespace=self.namespace, name=name))
        assert found is not None
        return found

    async def plant(self, attempt: model.Attempt, **behaviour: Any) -> dict[str, Any]:
        """``attempt``'s worker Pod, driven by kwok (see :func:`planting.plant_pod`); returns it raw."""
        return await plant_pod(self.api, self.cluster, attempt=attempt, **behaviour)

    async def plant_log(self, attempt: model.Attempt, *, container: str, content: bytes) -> None:
        await pods.plant_log(
            cluster=self.cluster,
            namespace=self.namespace,
            pod=attempt.pod_name,
            container=container,
            content=content,
        )

    def runtime(
        self, *, kubeconfig: Path | None = None, recorder: bool = True, timeout: float = 3.0
    ) -> contextlib.AbstractAsyncContextManager[model.Runtime]:
        """The operator's runtime, through the proxy unless another ``kubeconfig`` is given."""
        return self.runtime_for(kubeconfig or self.kubeconfig, recorder=recorder, timeout=timeout)

    async def launched(self, steps: step.Lifecycle, name: str) -> model.Tracked:
        """Execution ``name`` launched by one step (its worker handed, the step not settled) and
        its worker Pod ``Running``: the Execution as tracked then."""
        assert not (await steps.step(await self.tracked(name))).settled
        attempt = await self.attempt(execution=name)
        await pods.wait_for_phase(self.api, namespace=self.namespace, name=attempt.pod_name, phase="Running")
        return await self.tracked(name)

    @contextlib.asynccontextmanager
    async def stepping_running(
        self, name: str
    ) -> AsyncIterator[tuple[model.Attempt, step.Lifecycle, model.Tracked]]:
        """Execution ``name`` of a Swarm whose workers run for ten minutes (:meth:`running_execution`),
        launched by one step of a runtime through the proxy (:meth:`launched`): its attempt, the
        steps, open until the block ends, and the Execution as tracked once its worker runs."""
        attempt = await self.running_execution(name)
        async with self.runtime() as runtime:
            steps = self.steps(runtime)
            yield attempt, steps, await self.launched(steps, name)

    def steps(self, runtime: model.Runtime) -> step.Lifecycle:
        """The lifecycle's step of one Execution, on ``runtime`` and the store, unguarded."""
        return step.Lifecycle(
            runtime=runtime,
            store=self.store,
            guard=model.Unguarded(),
            instance="test",
            archive_deadline_seconds=60,
        )

    async def remove(
        self, attempt: model.Attempt, pod: Mapping[str, Any], *, timeout: float = 3.0
    ) -> launch.Removal:
        """Launch removal of ``pod`` (by its UID) in a runtime of its own, through the proxy."""
        async with self.runtime(timeout=timeout) as runtime:
            return await remove(runtime, attempt, pod["metadata"]["uid"])

    async def exists(self, attempt: model.Attempt) -> bool:
        """Whether ``attempt``'s worker Pod is still there."""
        return await pods.pod_exists(self.api, namespace=self.namespace, name=attempt.pod_name)

    async def startup(self, *, execution: str = "e1") -> records.StartupRecord | None:
        """The launch capture stored for ``execution``, if any."""
        return await self.store.read_startup(slug=SLUG, execution=execution)

    async def gone(self, attempt: model.Attempt) -> None:
        """Wait until ``attempt``'s worker Pod is gone."""
        await cleanup_passes.gone(self.api, self.namespace, attempt.pod_name)

    async def cleanup(
        self,
        runtime: model.Runtime,
        attempt: model.Attempt,
        *,
        guard: model.Guard | None = None,
        notify: events.Collected | None = None,
    ) -> records.Retained:
        """One final cleanup pass over ``attempt`` (see :func:`cleanup_passes.run_pass`)."""
        return await cleanup_passes.run_pass(runtime, self.store, attempt, guard=guard, notify=notify)

    async def journal(self, attempt: model.Attempt) -> dict[str, Any] | None:
        """``attempt``'s cleanup journal as stored, if any."""
        raw = await self.store.redis.hget(self.store.key(SLUG, "cleanup-journal"), attempt.execution)
        return None if raw is None else dict(json.loads(raw))

    async def retained(self, attempt: model.Attempt) -> dict[str, Any]:
        """``attempt``'s retained record as stored (it must be there)."""
        return await cleanup_passes.retained_of(self.store, attempt)

    async def removed_pods(self, attempt: model.Attempt) -> list[dict[str, Any]]:
        """The Pods ``attempt``'s retained record says cleanup removed."""
        removed: list[dict[str, Any]] = (await self.retained(attempt))["removed"]["pods"]
        return removed

    async def service_account(self, *, name: str, rules: Sequence[Mapping[str, Any]]) -> Path:
        """A kubeconfig straight to the API server as a ServiceAccount with exactly ``rules``."""
        return await rbac.service_account_with_rules(
            self.api,
            self.cluster,
            namespace=self.namespace,
            name=name,
            kubeconfig=self.tmp_path / f"{name}.kubeconfig",
            rules=rules,
        )

    def fault(self, fault: str, *, path: str, method: str | None = None, times: int | None = None) -> Rule:
        """Make the proxy answer matching requests with ``fault``: ``"timeout"`` (never answered),
        ``"reset"`` (the connection aborted) or an HTTP status (``"503"``); the proxy's rule."""
        if fault == "timeout":
            return self.proxy.hang(method=method, path=path, times=times)
        if fault == "reset":
            return self.proxy.reset(method=method, path=path, times=times)
        return self.proxy.fail(status=int(fault), method=method, path=path, times=times)


@pytest.fixture
def rig(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    fault_proxy: FaultProxy,
    proxy_kubeconfig: Path,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
    tmp_path: Path,
    swarm_crds: list[str],  # The planted Pods' owner is an Execution.
) -> Rig:
    # The fields in their order: the fixtures are named for what they are, the fields for their use.
    return Rig(
        admin_api, control_plane, namespace, fault_proxy, proxy_kubeconfig, runtime_for, store, tmp_path
    )
