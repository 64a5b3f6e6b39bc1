"""SecretClient: the workers' Redis credentials, one Secret per Swarm (``swarm-worker-redis-<swarm>``).

The operator reads, creates and patches only Secrets of that name
(:mod:`agentihooks_swarm.swarm.credentials`): never a list, never a delete (the Secret goes with its
Swarm, by its ownerReference).
"""

from __future__ import annotations

from agentihooks_swarm.kubernetes import core, transport as transport_

Object = transport_.Object


class SecretClient(core.CoreClient):
    """core/v1 Secrets: read and create (:class:`core.CoreClient`), and a merge patch."""

    def __init__(self, *, transport: transport_.Transport) -> None:
        super().__init__(transport=transport, plural="secrets")

    async def patch(self, *, namespace: str, name: str, body: Object) -> Object:
        """A JSON merge patch; with ``metadata.resourceVersion`` in ``body`` it applies only to the
        Secret as it was read (a change since answers 409: PreconditionFailed)."""
        return await self.transport.json(
            "PATCH",
            f"{core.core_path(namespace, self.plural)}/{name}",
            body=body,
            content_type="application/merge-patch+json",
            what=f"patch secret {namespace}/{name}",
        )
