"""A real local Kubernetes cluster for the tests, the demo and CI, from binaries built here.

Modules, each named for the part it starts or keeps:

* :mod:`.control_plane` — etcd, kube-apiserver (RBAC, Pod Security and NodeRestriction on),
  kube-controller-manager, kube-scheduler; :class:`ControlPlane` is the running cluster. A kwok
  cluster runs the oldest Kubernetes the chart allows instead of the newest when
  ``AGENTIHOOKS_SWARM_KUBERNETES=compat`` (:func:`kubernetes`).
* :mod:`.pki` — the CA, certificates and kubeconfigs.
* :mod:`.kwok_node` — the fast node: kwok plays Pods (``tests/support/cluster/kwok/`` Stages).
* :mod:`.real_node` — the real node: containerd, kubelet, kube-proxy, CoreDNS.
* :mod:`.host` — what a real node changes on this machine, recorded and put back.
* :mod:`.nodes` — the one place that decides which node a cluster gets.
* :mod:`.processes` — child processes, waits and readable errors.
* :mod:`.detached` — a cluster that outlives the command that started it, found by its state file
  (``python -m tests.tools.cluster up|down|status|env [--node kwok|real]`` is its command line).

Library use::

    plane = nodes.start(kind="kwok", workdir=tmp)   # or kind="real" (root; builds images)
    try:
        ...  # plane.kubeconfig, plane.server, plane.admin_token, plane.service_account_kubeconfig(...)
    finally:
        plane.stop()

Every child runs in its own process group; ``stop()`` kills the groups (and, for a real node,
its containers, then restores the machine), an ``atexit`` hook stops any cluster left running,
and children get ``PR_SET_PDEATHSIG`` so they die with the process that started them.
"""

from tests.support.cluster.control_plane import (
    COMPAT_KUBERNETES_VERSION,
    KUBERNETES_ENV,
    KUBERNETES_VERSION,
    POD_CIDR,
    SERVICE_CIDR,
    ControlPlane,
    Kubernetes,
    NodeKind,
    build,
    condition_true,
    kubernetes,
    start,
)
from tests.support.cluster.detached import STATE_ENV, STATE_FILE, named_cluster, state_dir
from tests.support.cluster.kwok_node import EMPTY_LOG, NODE_NAME, READINESS_LOG_PATH
from tests.support.cluster.pki import ADMIN_USER, write_kubeconfig
from tests.support.cluster.processes import ClusterError

__all__ = [
    "ADMIN_USER",
    "COMPAT_KUBERNETES_VERSION",
    "EMPTY_LOG",
    "KUBERNETES_ENV",
    "KUBERNETES_VERSION",
    "NODE_NAME",
    "POD_CIDR",
    "READINESS_LOG_PATH",
    "SERVICE_CIDR",
    "STATE_ENV",
    "STATE_FILE",
    "ClusterError",
    "ControlPlane",
    "Kubernetes",
    "NodeKind",
    "build",
    "condition_true",
    "kubernetes",
    "named_cluster",
    "start",
    "state_dir",
    "write_kubeconfig",
]
