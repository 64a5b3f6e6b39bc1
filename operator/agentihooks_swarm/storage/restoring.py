"""What a restore after a Redis failover needs of the store (:mod:`failover`): the primary's
identity, one evidence record as stored, and the compare-and-set that puts one back for the life
that wrote it. :class:`~agentihooks_swarm.storage.operations.AsyncStore` is one of these; each of
its evidence writes notes what it wrote (:meth:`Restoring._note`) for a later restore.
"""

from __future__ import annotations

from typing import Any, Final

import redis.asyncio.cluster

from agentihooks_swarm import errors
from agentihooks_swarm.storage import connection, failover, scripts
from agentihooks_swarm.storage.keys import FORGOTTEN, JOURNAL, OWNERS, RETAINED, STARTUP_DIAGNOSTICS

#: The hash of each kind of evidence a restore puts back (:mod:`failover`).
_EVIDENCE: Final[dict[failover.Kind, str]] = {
    "startup": STARTUP_DIAGNOSTICS,
    "journal": JOURNAL,
    "retained": RETAINED,
    "owner": OWNERS,
}
_RESTORE: Final = scripts.load("restore")
_ANSWERS: Final[tuple[failover.Answer, ...]] = (
    "written",
    "changed",
    "retained",
    "owner_changed",
    "forgotten",
)


class Restoring(connection.Connection):
    """The store's side of a failover restore."""

    #: The evidence this process wrote lately, for a restore after a failover (None: not kept).
    recent: failover.Recent | None = None

    def _note(self, kind: failover.Kind, *, slug: str, execution: str, raw: str, owner: str) -> None:
        if self.recent is not None:
            self.recent.note(kind=kind, slug=slug, execution=execution, raw=raw, owner=owner)

    async def primary_id(self) -> str | None:
        """The primary's replication id (a promoted replica, or a primary started again, has a new
        one); None when the server answering is not a primary. Raises :class:`errors.Unwatchable`
        on a cluster (each slot has its own primary) or a Redis that refuses ``INFO``."""
        if isinstance(self.redis, redis.asyncio.cluster.RedisCluster):
            raise errors.Unwatchable("a Redis Cluster: each slot has its own primary")
        try:
            with connection.translated():
                info = await self.redis.info("replication")
        except errors.StoreUnavailable as e:
            if isinstance(e.__cause__, redis.exceptions.ResponseError):
                raise errors.Unwatchable(f"INFO replication is refused: {e}") from e
            raise
        if info.get("role") != "master" or not info.get("master_replid"):
            return None
        return str(info["master_replid"])

    async def read_evidence(self, *, kind: failover.Kind, slug: str, execution: str) -> str | None:
        """One evidence record as stored (JSON), or None."""
        with connection.translated():
            raw = await self.redis.hget(self.key(slug, _EVIDENCE[kind]), execution)
        return None if raw is None else str(raw)

    async def replace_evidence(
        self,
        *,
        kind: failover.Kind,
        slug: str,
        execution: str,
        expected: str | None,
        new: str,
        owner: str,
    ) -> failover.Answer:
        """Write ``new`` if the stored record is still ``expected`` (None: none) and ``owner`` (the
        name's owner claim when it was written) is still the owner or was never forgotten, durably
        (``_RESTORE``): ``written``; ``changed`` when another write came first; ``retained`` for a
        journal entry of an execution that is retained; ``owner_changed`` or ``forgotten`` when
        the record's life is over (nothing is written then)."""
        listed: list[tuple[Any, ...]] = (
            [("SADD", f"{self.prefix}:swarms", slug)] if kind == "retained" else []
        )
        replies = await self._pipeline(
            slug=slug,
            commands=[
                *listed,
                (
                    "EVAL",
                    _RESTORE,
                    6,
                    self.key(slug, _EVIDENCE[kind]),
                    self.key(slug, RETAINED),
                    self.key(slug, JOURNAL),
                    self._index(slug),
                    self.key(slug, OWNERS),
                    self.key(slug, FORGOTTEN),
                    execution,
                    expected or "",
                    new,
                    self.clock(),
                    "1" if expected is None else "",
                    kind,
                    owner,
                ),
            ],
            durable=True,
        )
        answer = str(replies[-1])
        for known in _ANSWERS:
            if answer == known:
                return known
        raise errors.StoreUnavailable(f"Redis answered {answer!r} to a restore")
