"""One pipeline on one connection, and what a failed command means: the ground the store's
operations stand on (:class:`Connection`).

Each command group goes to the connection that serves the swarm's slot, so that a ``WAIT`` after
it counts exactly that group's writes. Connection failures, timeouts and commands Redis refuses
become :class:`~agentihooks_swarm.errors.StoreUnavailable`: a Redis that refuses a write (ACL, OOM,
a read-only replica) has not stored the evidence either.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import redis.asyncio.cluster
import redis.exceptions

from agentihooks_swarm import errors, metrics as metrics_
from agentihooks_swarm.storage import topology
from agentihooks_swarm.storage.keys import RETENTION_INDEX, Durability, key

#: Redirections while a slot moves or a cluster fails over: the write is sent again, this often.
_REDIRECTED_TRIES: Final = 20
_REDIRECTIONS = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)


@contextlib.contextmanager
def translated() -> Iterator[None]:
    # Not only outages: a Redis that refuses the command (ACL, OOM, a read-only replica) has not
    # stored the evidence either, and must keep the Pod just the same.
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as e:
        raise errors.StoreUnavailable(f"Redis is unavailable: {errors.trim(str(e))}") from e
    except redis.exceptions.RedisError as e:
        refusal = f"{type(e).__name__}: {errors.trim(str(e))}"
        raise errors.StoreUnavailable(f"Redis refused the command: {refusal}") from e


class Connection:
    """A Redis client, the key prefix and the durability wanted of evidence writes."""

    def __init__(
        self,
        *,
        client: topology.AsyncClient,
        prefix: str,
        durability: Durability | None = None,
        metrics: metrics_.Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = client
        self.prefix = prefix
        self.durability = durability or Durability()
        self.metrics = metrics
        #: Seconds since the epoch (a test passes its own).
        self.clock = clock

    def key(self, slug: str, name: str) -> str:
        return key(self.prefix, slug, name)

    def _index(self, slug: str) -> str:
        return self.key(slug, RETENTION_INDEX)

    async def _pipeline(self, *, slug: str, commands: Sequence[tuple[Any, ...]], durable: bool) -> list[Any]:
        """Send ``commands`` (all in the swarm's slot) on one connection, then WAIT when ``durable``.

        Returns the commands' replies (without WAIT's). Raises :class:`errors.StoreUnavailable`
        when a command fails or fewer than ``durability.replicas`` replicas acknowledged in time.
        """
        wait = durable and self.durability.replicas > 0
        tail: list[tuple[Any, ...]] = (
            [("WAIT", self.durability.replicas, int(self.durability.timeout_seconds * 1000))] if wait else []
        )
        with translated():
            if isinstance(self.redis, redis.asyncio.cluster.RedisCluster):
                replies = await self._cluster_pipeline(slug=slug, commands=[*commands, *tail])
            else:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for command in [*commands, *tail]:
                        pipe.execute_command(*command)
                    replies = await pipe.execute()
        if wait:
            acknowledged = int(replies[-1])
            ok = acknowledged >= self.durability.replicas
            if self.metrics is not None:
                self.metrics.replica_waits.labels(result="acknowledged" if ok else "timeout").inc()
            if not ok:
                raise errors.NotDurable(
                    f"Redis: {acknowledged} of {self.durability.replicas} replicas acknowledged the "
                    f"write within {self.durability.timeout_seconds}s (REDIS_MIN_REPLICAS); it is not "
                    "durable yet"
                )
            replies = replies[:-1]
        return list(replies)

    async def _cluster_pipeline(self, *, slug: str, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """All commands to the node owning the swarm's slot, on one of its connections.

        redis-py would follow a MOVED/ASK for each command on its own, on another connection, where
        a WAIT would no longer count this write. So redirections are not followed: the slot map is
        refreshed and the whole pipeline (idempotent writes) is sent again.
        """
        client = self.redis
        assert isinstance(client, redis.asyncio.cluster.RedisCluster)
        for attempt in range(_REDIRECTED_TRIES):
            await client.initialize()  # Once; a no-op afterwards.
            try:
                node = client.get_node_from_key(self._index(slug))
            except redis.exceptions.SlotNotCoveredError:
                node = None
            if node is None:
                if attempt == _REDIRECTED_TRIES - 1:
                    raise redis.exceptions.ClusterDownError(f"no node serves the slot of swarm {slug!r}")
                await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
                await client.nodes_manager.initialize()
                continue
            pipe = client.pipeline()
            for command in commands:
                pipe.execute_command(*command, target_nodes=node)
            replies = await pipe.execute(raise_on_error=False, allow_redirections=False)
            failed = [r for r in replies if isinstance(r, Exception)]
            if not failed:
                return list(replies)
            if not isinstance(failed[0], _REDIRECTIONS) or attempt == _REDIRECTED_TRIES - 1:
                raise failed[0]
            await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
            await client.nodes_manager.initialize()
        raise AssertionError("unreachable")

    async def ping(self) -> None:
        with translated():
            await self.redis.ping()

    async def aclose(self) -> None:
        await self.redis.aclose()
