"""Which namespace owns a swarm's slug (additive to the spec).

Keys are the spec's ``PREFIX:{SLUG}:NAME``, and a slug is a Swarm's name, which two namespaces may
both use. So the first namespace to use a slug owns it (``PREFIX:{SLUG}:namespace``, set once):
its records, fingerprints, refusal budget and tombstones are that namespace's alone, and a Swarm
of the same name elsewhere is told ``SlugInUse`` instead of being shown them. A slug is released
(``records release``, :meth:`agentihooks_swarm.store.Store.release`) only by its owner, and only
once nothing of it is left in Redis.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from agentihooks_swarm.storage import connection, scripts
from agentihooks_swarm.storage.keys import NAMESPACE

_CLAIM: Final = scripts.load("claim_slug")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Slugs:
    """The slug claims, on the store's connection (one round trip each)."""

    connection: connection.Connection

    async def claim(self, *, slug: str, namespace: str) -> str:
        """Claim ``slug`` for ``namespace`` unless another one owns it; the owner's namespace."""
        with connection.translated():
            owner = await self.connection.redis.eval(
                _CLAIM, 1, self.connection.key(slug, NAMESPACE), namespace
            )
        return str(owner)

    async def owner(self, *, slug: str) -> str | None:
        """The namespace that owns ``slug``, or None when none has claimed it (an older version's
        records)."""
        with connection.translated():
            owner = await self.connection.redis.get(self.connection.key(slug, NAMESPACE))
        if owner is None:
            return None
        return owner.decode() if isinstance(owner, bytes) else str(owner)
