"""Real RBAC for tests: a ServiceAccount bound to a Role with exactly the given rules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from tests.support.cluster import ControlPlane


async def service_account_with_rules(
    api: client.ApiClient,
    cluster: ControlPlane,
    *,
    namespace: str,
    name: str,
    rules: Sequence[Mapping[str, Any]],
    kubeconfig: Path,
    server: str | None = None,
) -> Path:
    """Create ServiceAccount + Role + RoleBinding ``name``; return a kubeconfig that acts as it."""
    body: Any = {"metadata": {"name": name}}
    await client.CoreV1Api(api).create_namespaced_service_account(namespace, body)
    rbac = client.RbacAuthorizationV1Api(api)
    role: Any = {"metadata": {"name": name}, "rules": [dict(rule) for rule in rules]}
    await rbac.create_namespaced_role(namespace, role)
    binding: Any = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    await rbac.create_namespaced_role_binding(namespace, binding)
    return cluster.service_account_kubeconfig(namespace=namespace, name=name, path=kubeconfig, server=server)
