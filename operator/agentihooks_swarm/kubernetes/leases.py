"""LeaseClient: the coordination.k8s.io Leases the replicas elect their leader by."""

from __future__ import annotations

from agentihooks_swarm import errors
from agentihooks_swarm.kubernetes import transport as transport_

Object = transport_.Object


class LeaseClient:
    """Read, create and replace a Lease (by resourceVersion)."""

    def __init__(self, *, transport: transport_.Transport) -> None:
        self.transport = transport

    @staticmethod
    def _path(namespace: str) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    async def read(self, *, namespace: str, name: str) -> Object | None:
        try:
            return await self.transport.json(
                "GET", f"{self._path(namespace)}/{name}", what=f"read lease {namespace}/{name}"
            )
        except errors.NotFound:
            return None

    async def create(self, *, namespace: str, body: Object) -> Object:
        return await self.transport.json(
            "POST",
            self._path(namespace),
            body=body,
            what=f"create lease {namespace}/{body['metadata']['name']}",
        )

    async def replace(self, *, namespace: str, body: Object) -> Object:
        """PUT with the body's resourceVersion: a concurrent change answers 409 (PreconditionFailed)."""
        name = body["metadata"]["name"]
        return await self.transport.json(
            "PUT", f"{self._path(namespace)}/{name}", body=body, what=f"replace lease {namespace}/{name}"
        )
