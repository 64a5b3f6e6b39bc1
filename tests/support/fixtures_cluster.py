"""pytest fixtures on the local control plane (tests/support/cluster.py).

Load with ``pytest_plugins = ["tests.support.fixtures_cluster"]`` (or ``-p``). Fixtures:

``control_plane`` -> ``ControlPlane``
    The cluster of the test's node kind: tests marked ``@pytest.mark.realnode`` get the real
    node (containerd + kubelet, real containers; root), every other test the kwok node. Each
    kind is started once per session (binaries and images are built at collection time, before
    any test's timeout starts) and stopped at its end. With ``AGENTIHOOKS_SWARM_CLUSTER_STATE``
    set (``eval "$(python -m tests.tools.cluster env)"`` after ``cluster up``), the running CLI
    cluster is reused for tests of its kind and left running. With
    ``AGENTIHOOKS_SWARM_KUBERNETES=compat`` (``make test-compat``) the kwok cluster runs the oldest
    Kubernetes the chart allows, always one of the session's own, and real-node tests are refused.
``namespace`` (function) -> ``str``
    A fresh namespace, Pod Security ``enforce: baseline`` unless the test is marked
    ``@pytest.mark.pod_security("restricted")`` (or ``"privileged"``); its ``default``
    ServiceAccount exists when the test starts; deleted afterwards.
``kubelet`` (function) -> ``scenarios.Kubelet``
    Who plays a never-started scenario's node side: kwok (and the Events the test posts), or the
    real kubelet itself.
``admin_api`` (function, async) -> ``kubernetes_asyncio.client.ApiClient``
    A client on the admin kubeconfig (client certificate, system:masters).

``api_client(kubeconfig=...)`` opens an ``ApiClient`` on any kubeconfig, e.g. one from
``control_plane.service_account_kubeconfig(...)``.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config

from agentihooks_swarm.kubernetes import owners
from tests.support import scenarios
from tests.support.cluster import (
    COMPAT_KUBERNETES_VERSION,
    KUBERNETES_ENV,
    KUBERNETES_VERSION,
    STATE_ENV,
    ClusterError,
    ControlPlane,
    NodeKind,
    build,
    host,
    kubernetes,
    named_cluster,
    nodes,
)

_BIN_DIR = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "pod_security(level): Pod Security enforce level of the `namespace` fixture (default: baseline)",
    )
    config.addinivalue_line(
        "markers",
        "realnode: runs on the real node (containerd, kubelet, real containers; needs root)",
    )
    config.addinivalue_line(
        "markers",
        "compat: backs the compatibility matrix: also runs on the oldest Kubernetes the chart allows"
        " (make test-compat, with the smoke test)",
    )


def node_kind(item: pytest.Item) -> NodeKind:
    """The one place that decides which node a test's cluster has."""
    return "real" if item.get_closest_marker("realnode") else "kwok"


def pytest_report_header(config: pytest.Config) -> str:
    if kubernetes() == "compat":
        return f"kubernetes: {COMPAT_KUBERNETES_VERSION} ({KUBERNETES_ENV}=compat, the oldest allowed)"
    return f"kubernetes: {KUBERNETES_VERSION}"


def _reused(kind: NodeKind) -> ControlPlane | None:
    """The CLI's running cluster, which runs the newest Kubernetes: a compat session starts its own."""
    return None if kubernetes() == "compat" else named_cluster(kind=kind)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the binaries (and a real node's images) before any test runs: a cold build outlasts
    a test's timeout."""
    if session.config.option.collectonly:
        return
    users = [item for item in session.items if "control_plane" in getattr(item, "fixturenames", ())]
    if kubernetes() == "compat":
        real = [item.nodeid for item in users if node_kind(item) == "real"]
        if real:
            pytest.exit(
                f"{KUBERNETES_ENV}=compat has no real node, wanted by {real[:3]}",
                returncode=pytest.ExitCode.USAGE_ERROR,
            )
        if users:
            session.config.stash[_BIN_DIR] = build(only="kwok")
        return
    if users and os.environ.get(STATE_ENV):
        # A stale or dead cluster named by the environment: one clear message, not one per test.
        try:
            for kind in sorted({node_kind(item) for item in users}):
                named_cluster(kind=kind)
        except ClusterError as error:
            pytest.exit(str(error), returncode=pytest.ExitCode.USAGE_ERROR)
    if users and not os.environ.get(STATE_ENV):
        kinds = {node_kind(item) for item in users}
        session.config.stash[_BIN_DIR] = build(only="kwok" if kinds == {"kwok"} else None)
    if any(node_kind(item) == "real" for item in users):
        nodes.real_node_images()


def _session_plane(
    request: pytest.FixtureRequest, factory: pytest.TempPathFactory, kind: NodeKind
) -> Iterator[ControlPlane]:
    reused = _reused(kind)
    if reused is not None:
        yield reused
        return
    bin_dir = request.config.stash.get(_BIN_DIR, None) or build(only=kind)
    machine = host.baseline() if kind == "real" else None
    plane = nodes.start(kind=kind, workdir=factory.mktemp(f"cluster-{kind}"), bin_dir=bin_dir)
    try:
        _check_version(plane)
        yield plane
    finally:
        plane.stop()
    if machine is not None:  # a real node must leave the machine as it found it
        left = host.leftovers(workdir=plane.workdir)
        assert not left, f"the real node left {left}"
        assert host.snapshot() == machine, "the real node did not restore the machine's settings"


def _check_version(plane: ControlPlane) -> None:
    """The API server is the version the session asked for (a stale cache or a wrong link would
    otherwise pass the compat tests on the newest Kubernetes)."""
    wanted = COMPAT_KUBERNETES_VERSION if kubernetes() == "compat" else KUBERNETES_VERSION
    served = plane.request_json("GET", "/version").get("gitVersion")
    if served != wanted:
        raise ClusterError(f"the API server in {plane.bin_dir} is {served}, not {wanted}")


@pytest.fixture(scope="session")
def kwok_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    yield from _session_plane(request, tmp_path_factory, "kwok")


@pytest.fixture(scope="session")
def real_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    yield from _session_plane(request, tmp_path_factory, "real")


@asynccontextmanager
async def api_client(*, kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    """An ``ApiClient`` on ``kubeconfig``, closed on exit."""
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration=configuration) as api:
        yield api


@pytest.fixture
def control_plane(request: pytest.FixtureRequest) -> ControlPlane:
    kind = node_kind(request.node)
    plane: ControlPlane = request.getfixturevalue("real_plane" if kind == "real" else "kwok_plane")
    return plane


@pytest.fixture
def kubelet(request: pytest.FixtureRequest) -> scenarios.Kubelet:
    """The node side of a never-started scenario (tests/support/scenarios.py), for this test's node."""
    if node_kind(request.node) == "real":
        from tests.support import images

        return scenarios.RealKubelet(busybox=images.BUSYBOX_REF)
    return scenarios.KwokKubelet()


@pytest.fixture
def namespace(request: pytest.FixtureRequest, control_plane: ControlPlane) -> Iterator[str]:
    marker = request.node.get_closest_marker("pod_security")
    level = str(marker.args[0]) if marker else "baseline"
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{slug or 't'}-{uuid.uuid4().hex[:6]}"
    control_plane.request_json(
        "POST",
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": {
                    "pod-security.kubernetes.io/enforce": level,
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            },
        },
    )
    deadline = time.monotonic() + 30
    while control_plane.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] != 200:
        if time.monotonic() > deadline:
            raise ClusterError(f"namespace {name}: no default ServiceAccount after 30s")
        time.sleep(0.05)
    try:
        yield name
    finally:
        release_evidence(control_plane, name)
        control_plane.request("DELETE", f"/api/v1/namespaces/{name}")


def release_evidence(control_plane: ControlPlane, namespace: str) -> None:
    """Remove the operator's evidence finalizer from the worker Pods a test left (its operator is
    stopped by now), as docs/install.md tells a user to after an uninstall: else they would hold
    the namespace in Terminating for good."""
    status, data = control_plane.request("GET", f"/api/v1/namespaces/{namespace}/pods")
    if status != 200:
        return
    for pod in json.loads(data).get("items") or []:
        metadata = pod.get("metadata") or {}
        finalizers = metadata.get("finalizers") or []
        if owners.EVIDENCE_FINALIZER not in finalizers:
            continue
        kept = [f for f in finalizers if f != owners.EVIDENCE_FINALIZER]
        control_plane.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{metadata['name']}",
            {"metadata": {"finalizers": kept or None}},
            content_type="application/merge-patch+json",
        )


@pytest_asyncio.fixture
async def admin_api(control_plane: ControlPlane) -> AsyncIterator[client.ApiClient]:
    async with api_client(kubeconfig=control_plane.kubeconfig) as api:
        yield api
