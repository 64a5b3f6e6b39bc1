"""The fast node: kwok plays one fake Node (``kwok-node-0``) and its Pods.

Pod status is driven by the kwok Stages in ``tests/support/cluster/kwok/`` (annotation protocol:
``tests/support/pods.py``), and kwok's kubelet-like HTTPS server answers the ``containerLogs``
requests kube-apiserver proxies for ``GET pods/{name}/log`` from planted log files (the Node's
InternalIP/port and the apiserver's kubelet client flags point at it; its serving certificate is
checked against the test CA). kwok never schedules; kube-scheduler binds the Pods.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml  # type: ignore[import-untyped, unused-ignore]

from tests.support.cluster.processes import Starter

if TYPE_CHECKING:
    from tests.support.cluster.control_plane import ControlPlane

KWOK_DIR: Final = Path(__file__).resolve().parent / "kwok"
NODE_NAME: Final = "kwok-node-0"
#: File under ``pod_logs_dir`` kwok serves for a container that has no planted log.
EMPTY_LOG: Final = "empty.log"
_POD_CIDR: Final = "10.244.0.0/16"
#: The log kwok serves once its Logs informer works (planted at start; see :func:`start`).
READINESS_LOG_PATH: Final = "/containerLogs/kube-system/kwok-logs-readiness/probe"


def start(plane: ControlPlane, starter: Starter, *, pki: Path, port: int) -> None:
    """Register the fake Node, start kwok on ``port`` and wait until it serves planted logs."""
    from tests.support.cluster import control_plane as cp

    for crd in yaml.safe_load_all((KWOK_DIR / "crds.yaml").read_text()):
        cp.create(plane, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    cp.create(
        plane,
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": plane.node_name,
                "labels": {
                    "kubernetes.io/hostname": plane.node_name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                },
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            },
        },
    )
    starter.wait(
        "the kwok Logs CRD to be established", lambda: cp.crd_established(plane, "logs.kwok.x-k8s.io")
    )
    # A fresh CRD answers 429 until its storage is ready; kwok's informer would back off on that.
    starter.wait(
        "the kwok Logs API to list",
        lambda: cp.api_ok(plane, "/apis/kwok.x-k8s.io/v1alpha1/logs", expect=None),
    )
    kwok_config = _write_config(plane, pki=pki, port=port)
    starter.spawn(
        "kwok",
        [str(plane.bin_dir / "kwok"), f"--kubeconfig={plane.kubeconfig}", f"--config={kwok_config}"],
        env={"KWOK_WORKDIR": str(plane.workdir / "kwok-home")},
    )
    starter.wait(f"Node {plane.node_name} Ready and untainted", lambda: cp.node_ready(plane, port=port))
    starter.wait("kwok /healthz", lambda: cp.http_ok(f"http://127.0.0.1:{port}/healthz", b"ok"))
    # kwok's Logs informer is asynchronous: wait until a planted log is served.
    readiness = plane.pod_logs_dir / "readiness.log"
    readiness.write_bytes(b"2000-01-01T00:00:00.000000000Z stdout F ready\n")
    cp.create(
        plane,
        "/apis/kwok.x-k8s.io/v1alpha1/namespaces/kube-system/logs",
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": "kwok-logs-readiness", "namespace": "kube-system"},
            "spec": {"logs": [{"logsFile": str(readiness)}]},
        },
    )
    starter.wait("kwok to serve planted logs", lambda: _serves(plane, b"ready\n"))


def _serves(plane: ControlPlane, content: bytes) -> bool | None:
    status, body = plane.kwok_get(READINESS_LOG_PATH, timeout=2)
    return True if (status, body) == (200, content) else None


def _write_config(plane: ControlPlane, *, pki: Path, port: int) -> Path:
    empty_log = plane.pod_logs_dir / EMPTY_LOG
    empty_log.touch()
    documents: list[Any] = [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": {
                "manageNodesWithAnnotationSelector": "kwok.x-k8s.io/node=fake",
                "nodeIP": "127.0.0.1",
                "nodeName": plane.node_name,
                "nodePort": port,
                "serverAddress": f"127.0.0.1:{port}",
                "tlsCertFile": str(pki / "kwok.crt"),
                "tlsPrivateKeyFile": str(pki / "kwok.key"),
                "cidr": _POD_CIDR,
                "enableCRDs": ["Logs"],
                "enableDebuggingHandlers": True,
                "enableProfilingHandler": False,
                "enableContentionProfiling": False,
                "nodeLeaseDurationSeconds": 0,
                "nodeLeaseParallelism": 1,
                "podPlayStageParallelism": 4,
                "nodePlayStageParallelism": 1,
                "podsOnNodeSyncParallelism": 1,
                "enablePodsOnNodeSyncListPager": True,
                "enablePodsOnNodeSyncStreamWatch": False,
            },
        }
    ]
    for name in ("node.yaml", "pods.yaml"):
        documents.extend(d for d in yaml.safe_load_all((KWOK_DIR / name).read_text()) if d)
    # A container without a planted log has printed nothing (kwok would otherwise answer 400).
    documents.append(
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterLogs",
            "metadata": {"name": "agentihooks-no-output"},
            "spec": {"logs": [{"logsFile": str(empty_log)}]},
        }
    )
    path = plane.workdir / "kwok.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path
