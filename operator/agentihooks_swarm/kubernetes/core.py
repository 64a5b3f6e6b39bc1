"""A core/v1 kind in a namespace: read, create, list, delete by UID, release the evidence finalizer.
ConfigMaps and Services of a worker are clients of this class; the Pod client (:mod:`.pods`) builds
on it."""

from __future__ import annotations

import builtins

from agentihooks_swarm import errors
from agentihooks_swarm.kubernetes import owners, transport as transport_

Object = transport_.Object


def core_path(namespace: str | None, plural: str) -> str:
    """The path of a core/v1 kind's objects, in one namespace or (None) in all."""
    return f"/api/v1/namespaces/{namespace}/{plural}" if namespace else f"/api/v1/{plural}"


class CoreClient:
    """One core/v1 kind (``plural``: ``configmaps``, ``services``, ``pods``), errors sorted by status."""

    def __init__(self, *, transport: transport_.Transport, plural: str) -> None:
        self.transport = transport
        self.plural = plural
        self._singular = plural[:-1]

    async def read(self, *, namespace: str, name: str) -> Object | None:
        """The object as the API server has it now, or None if there is none."""
        try:
            return await self.transport.json(
                "GET",
                f"{core_path(namespace, self.plural)}/{name}",
                what=f"read {self._singular} {namespace}/{name}",
            )
        except errors.NotFound:
            return None

    async def create(self, *, namespace: str, body: Object) -> Object:
        return await self.transport.json(
            "POST",
            core_path(namespace, self.plural),
            body=body,
            what=f"create {self._singular} {namespace}/{body['metadata']['name']}",
        )

    async def list(self, *, namespace: str, selector: str) -> builtins.list[Object]:
        """The objects by label selector."""
        return await self._list(namespace=namespace, selector=selector, name=None)

    async def still_listed(self, *, namespace: str, name: str, uid: str) -> bool:
        """Whether a list by name still shows this UID: the second opinion on a 404 or a 409."""
        items = await self._list(namespace=namespace, selector=None, name=name)
        return any((item.get("metadata") or {}).get("uid") == uid for item in items)

    async def _list(self, *, namespace: str, selector: str | None, name: str | None) -> builtins.list[Object]:
        query = []
        if selector is not None:
            query.append(("labelSelector", selector))
        if name is not None:
            query.append(("fieldSelector", f"metadata.name={name}"))
        found = await self.transport.json(
            "GET",
            core_path(namespace, self.plural),
            query=query,
            what=f"list {self.plural} {namespace} {selector or ''}{name or ''}",
        )
        items: builtins.list[Object] = found.get("items") or []
        return items

    async def delete(
        self, *, namespace: str, name: str, uid: str, resource_version: str | None = None
    ) -> Object:
        """Delete the object only if it still has this UID and (given) this resourceVersion: the
        object as it was read, not one that changed since (409 → PreconditionFailed, 404 → NotFound).

        Returns the API server's answer: the object, still there while a finalizer or a grace
        period holds it, or a Status once it is gone."""
        preconditions = (
            {"uid": uid} if resource_version is None else {"uid": uid, "resourceVersion": resource_version}
        )
        body: Object = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": preconditions,
            "propagationPolicy": "Background",
        }
        return await self.transport.json(
            "DELETE",
            f"{core_path(namespace, self.plural)}/{name}",
            body=body,
            what=f"delete {self._singular} {namespace}/{name} uid={uid}",
        )

    async def release(
        self, *, namespace: str, name: str, uid: str, found: Object, as_judged: bool = False
    ) -> None:
        """Remove the operator's evidence finalizer from the object, once its evidence is stored.

        A JSON patch that tests the UID and the finalizer at its index in ``found`` (the object as
        last seen) before removing it, so it never removes another entry; when the list moved, it
        reads the object once more and tries again. Gone, replaced or already released is done.

        ``as_judged``: ``found`` is the state its evidence was judged by (someone else deletes it),
        so the patch also tests its ``resourceVersion``, and a change since (a worker that failed
        meanwhile) raises :class:`errors.PreconditionFailed` instead of releasing it unjudged."""
        for _ in range(3):
            metadata = found.get("metadata") or {}
            finalizers = metadata.get("finalizers") or []
            if metadata.get("uid") != uid or owners.EVIDENCE_FINALIZER not in finalizers:
                return
            index = finalizers.index(owners.EVIDENCE_FINALIZER)
            patch: builtins.list[Object] = [
                {"op": "test", "path": "/metadata/uid", "value": uid},
                {"op": "test", "path": f"/metadata/finalizers/{index}", "value": owners.EVIDENCE_FINALIZER},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"},
            ]
            version = metadata.get("resourceVersion")
            if as_judged and isinstance(version, str):
                patch.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": version})
            try:
                await self.transport.json(
                    "PATCH",
                    f"{core_path(namespace, self.plural)}/{name}",
                    body=patch,
                    what=f"release the evidence finalizer of {self._singular} {namespace}/{name} uid={uid}",
                    content_type="application/json-patch+json",
                )
                return
            except errors.NotFound as e:
                # Believed only when a list agrees: a Pod left holding the finalizer is held for good.
                if await self.still_listed(namespace=namespace, name=name, uid=uid):
                    raise errors.ApiUnavailable(
                        f"release the evidence finalizer of {self._singular} {namespace}/{name}: the "
                        "patch answered 404 but a list still shows it; will retry"
                    ) from e
                return
            except errors.ApiRefused as e:
                if e.status not in (409, 422):  # Not a failed test (a 403, say): said as it is.
                    raise
                if as_judged:
                    raise errors.PreconditionFailed(
                        f"release the evidence finalizer of {self._singular} {namespace}/{name}: it "
                        "changed since it was judged",
                        status=e.status,
                    ) from e
                again = await self.read(namespace=namespace, name=name)
                if again is None:
                    return
                found = again
        raise errors.ApiUnavailable(
            f"release the evidence finalizer of {self._singular} {namespace}/{name}: its finalizers "
            "kept changing; will retry"
        )
