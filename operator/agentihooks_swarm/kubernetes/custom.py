"""CustomClient: one kind of the operator's own resources (``swarms``, ``executions``), by name:
read, patch, patch the status, annotate, delete by UID, list page by page, watch."""

from __future__ import annotations

from collections.abc import AsyncIterator

from agentihooks_swarm import errors
from agentihooks_swarm.kubernetes import transport as transport_

Object = transport_.Object

#: The API group and version of the Swarms and Executions.
API_PATH = "/apis/swarm.agentihooks.io/v1alpha1"


class CustomClient:
    """The custom objects of one kind (``plural``), in any namespace."""

    def __init__(self, *, transport: transport_.Transport, plural: str) -> None:
        self.transport = transport
        self.plural = plural

    def _path(self, *, namespace: str | None, name: str | None = None) -> str:
        scope = f"/namespaces/{namespace}" if namespace else ""
        return f"{API_PATH}{scope}/{self.plural}" + (f"/{name}" if name else "")

    async def read(self, *, namespace: str, name: str) -> Object | None:
        """The object as the API server has it now, or None if there is none."""
        try:
            return await self.transport.json(
                "GET",
                self._path(namespace=namespace, name=name),
                what=f"read {self.plural} {namespace}/{name}",
            )
        except errors.NotFound:
            return None

    async def annotate(self, *, namespace: str, name: str, annotations: dict[str, str]) -> Object:
        """Set annotations on the object (a JSON merge patch of ``metadata.annotations``)."""
        return await self.transport.json(
            "PATCH",
            self._path(namespace=namespace, name=name),
            body={"metadata": {"annotations": annotations}},
            content_type="application/merge-patch+json",
            what=f"annotate {self.plural} {namespace}/{name}",
        )

    async def patch(self, *, namespace: str, name: str, body: Object) -> Object:
        """A JSON merge patch of the object (metadata and spec; not its status)."""
        return await self.transport.json(
            "PATCH",
            self._path(namespace=namespace, name=name),
            body=body,
            content_type="application/merge-patch+json",
            what=f"patch {self.plural} {namespace}/{name}",
        )

    async def patch_status(self, *, namespace: str, name: str, uid: str, status: Object) -> Object:
        """A JSON merge patch of the object's status subresource, only if the object still has this
        UID (another object under the name answers 409: PreconditionFailed); the object as it is
        after it."""
        return await self.transport.json(
            "PATCH",
            self._path(namespace=namespace, name=name) + "/status",
            body={"metadata": {"uid": uid}, "status": status},
            content_type="application/merge-patch+json",
            what=f"patch the status of {self.plural} {namespace}/{name}",
        )

    async def delete(self, *, namespace: str, name: str, uid: str) -> None:
        """Delete the object only if it still has this UID (409 → PreconditionFailed, 404 → NotFound)."""
        body: Object = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        await self.transport.send(
            "DELETE",
            self._path(namespace=namespace, name=name),
            body=body,
            what=f"delete {self.plural[:-1]} {namespace}/{name} uid={uid}",
        )

    def list_pages(self, *, namespace: str | None, field_selector: str, limit: int) -> AsyncIterator[Object]:
        """Every page of a list of the objects (see :meth:`transport.Transport.pages`)."""
        return self.transport.pages(
            self._path(namespace=namespace),
            field_selector=field_selector,
            limit=limit,
            what=f"list {self.plural} {namespace or 'everywhere'} {field_selector}",
        )

    async def served_pages(
        self, *, namespaces: tuple[str, ...], field_selector: str, limit: int
    ) -> AsyncIterator[Object]:
        """Every page of the objects of each namespace served, one namespace after the other (a
        Role in each is enough); ``namespaces`` empty: one list of the whole cluster."""
        for namespace in namespaces or (None,):
            async for page in self.list_pages(
                namespace=namespace, field_selector=field_selector, limit=limit
            ):
                yield page

    def listing(self, *, namespace: str | None) -> transport_.Listing:
        """Every object of the kind, in one namespace or all, for an informer."""
        return transport_.Listing(
            transport=self.transport,
            path=self._path(namespace=namespace),
            field_selector="",
            what=f"{self.plural} {namespace or 'everywhere'}",
        )
