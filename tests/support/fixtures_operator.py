"""pytest fixtures for the operator under test: its CRDs, its collaborators, its process.

``swarm_crds`` (session)
    The CRDs from ``manifests/crds/`` applied to the control plane (established).
``store`` (function, async)
    The operator's real ``AsyncStore`` on the test's empty Redis.
``runtime_for`` (function)
    ``async with runtime_for(kubeconfig) as runtime:`` — the operator's real ``Runtime``
    (the Kubernetes clients on kubernetes-asyncio, Redis recorder, fresh metrics) on any
    kubeconfig: admin, the fault proxy's, or a ServiceAccount's.
``operator`` (function)
    A factory: ``operator(kubeconfig=..., namespace=...)`` gives a started
    :class:`OperatorProcess`; every one is stopped after the test, and its log is printed when
    the test failed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from agentihooks_swarm import metrics, settings
from agentihooks_swarm.kubernetes import clients
from agentihooks_swarm.lifecycle import model, worker_policy
from agentihooks_swarm.storage import operations
from tests.support import crds, pods
from tests.support.cluster import ControlPlane
from tests.support.fixtures_cluster import api_client
from tests.support.operator_process import OperatorProcess

_APPLIED: dict[str, list[str]] = {}


@pytest.fixture
def swarm_crds(control_plane: ControlPlane) -> list[str]:
    """The Swarm and Execution CRDs, applied once per cluster (session)."""
    if control_plane.server not in _APPLIED:
        _APPLIED[control_plane.server] = crds.apply(control_plane)
    return _APPLIED[control_plane.server]


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[operations.AsyncStore]:
    async with operations.open_store(settings.Settings(redis_url=redis_url)) as opened:
        yield opened


@pytest.fixture
async def acl_users_dropped(store: operations.AsyncStore) -> AsyncIterator[None]:
    """The session's Redis keeps no ACL user a test made (FLUSHALL leaves users alone)."""
    yield
    for user in await store.redis.execute_command("ACL", "USERS"):
        if user != "default":
            await store.redis.execute_command("ACL", "DELUSER", user)


#: The safe default worker policy, and the test workers' kwok annotations (a prefixed key).
TEST_WORKER_POLICY = worker_policy.WorkerPolicy(metadata_prefixes=(pods.PREFIX,))


class RuntimeFactory(Protocol):
    def __call__(
        self, kubeconfig: Path, *, recorder: bool = True, timeout: float = 3.0
    ) -> contextlib.AbstractAsyncContextManager[model.Runtime]: ...


@pytest.fixture
def runtime_for(store: operations.AsyncStore) -> RuntimeFactory:
    @contextlib.asynccontextmanager
    async def factory(
        kubeconfig: Path, *, recorder: bool = True, timeout: float = 3.0
    ) -> AsyncIterator[model.Runtime]:
        async with api_client(kubeconfig=kubeconfig) as api:
            yield model.Runtime(
                cluster=clients.build(api=api, timeout=timeout),
                recorder=store if recorder else None,
                metrics=metrics.Metrics(),
                worker_policy=TEST_WORKER_POLICY,
            )

    return factory


OperatorFactory = Callable[..., OperatorProcess]


@pytest.fixture
def operator(
    request: pytest.FixtureRequest, redis_url: str, tmp_path: Path, swarm_crds: list[str]
) -> Iterator[OperatorFactory]:
    started: list[OperatorProcess] = []

    def factory(
        *,
        kubeconfig: Path,
        namespace: str | None,
        env: dict[str, str] | None = None,
        start: bool = True,
        **kwargs: Any,
    ) -> OperatorProcess:
        process = OperatorProcess(
            kubeconfig=kubeconfig,
            redis_url=redis_url,
            namespace=namespace,
            log_path=tmp_path / f"operator-{len(started)}.log",
            env=env,
            **kwargs,
        )
        started.append(process)
        if start:
            process.start()
        return process

    yield factory
    for process in started:
        process.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for process in started:
            print(f"----- {process.log_path.name} -----\n{process.tail(200)}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
