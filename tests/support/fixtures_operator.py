"""pytest fixtures for the operator under test: its CRDs, its collaborators, its process.

``swarm_crds`` (session)
    The CRDs from ``manifests/crds/`` applied to the control plane (established).
``store`` (function, async)
    The operator's real ``AsyncStore`` on the test's empty Redis.
``runtime_for`` (function)
    ``async with runtime_for(kubeconfig) as runtime:`` — the operator's real ``Runtime``
    (PodClient on kubernetes-asyncio, Redis recorder, fresh metrics) on any kubeconfig: admin,
    the fault proxy's, or a ServiceAccount's.
``operator`` (function)
    A factory: ``operator(kubeconfig=..., namespace=...)`` gives a started
    :class:`OperatorProcess`; every one is stopped after the test, and its log is printed when
    the test failed.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml

from agentihooks_swarm import launch, metrics, settings, store as store_
from agentihooks_swarm.kubernetes import pods as pod_client
from tests.support.cluster import ClusterError, ControlPlane
from tests.support.fixtures_cluster import api_client
from tests.support.operator_process import OperatorProcess

CRDS = Path(__file__).resolve().parents[2] / "manifests" / "crds"


@pytest.fixture(scope="session")
def swarm_crds(control_plane: ControlPlane) -> list[str]:
    names = []
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        name = crd["metadata"]["name"]
        path_ = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        status, raw = control_plane.request("GET", path_)
        if status == 200:  # A reused cluster: bring the CRD up to date with this checkout.
            crd["metadata"]["resourceVersion"] = json.loads(raw)["metadata"]["resourceVersion"]
            control_plane.request_json("PUT", path_, crd)
        else:
            control_plane.request_json("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        names.append(name)
    deadline = time.monotonic() + 30
    for name in names:
        while True:
            found = control_plane.request_json(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            )
            conditions = {c["type"]: c["status"] for c in found.get("status", {}).get("conditions", [])}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise ClusterError(f"CRD {name} not established: {json.dumps(conditions)}")
            time.sleep(0.1)
    return names


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[store_.AsyncStore]:
    async with store_.open_store(settings.Settings(redis_url=redis_url)) as opened:
        yield opened


class RuntimeFactory(Protocol):
    def __call__(
        self, kubeconfig: Path, *, recorder: bool = True, timeout: float = 3.0
    ) -> contextlib.AbstractAsyncContextManager[launch.Runtime]: ...


@pytest.fixture
def runtime_for(store: store_.AsyncStore) -> RuntimeFactory:
    @contextlib.asynccontextmanager
    async def factory(
        kubeconfig: Path, *, recorder: bool = True, timeout: float = 3.0
    ) -> AsyncIterator[launch.Runtime]:
        async with api_client(kubeconfig=kubeconfig) as api:
            yield launch.Runtime(
                pods=pod_client.PodClient(api=api, timeout=timeout),
                recorder=store if recorder else None,
                metrics=metrics.Metrics(),
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
        namespace: str,
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
