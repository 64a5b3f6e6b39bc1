"""What a swarm's keys take in Redis: the bytes its quota is held to (additive to the spec).

Measured, not counted: the sum of ``MEMORY USAGE key SAMPLES 0`` over every key the operator
keeps for the swarm (:data:`MEASURED`), in one round trip to the server that holds the swarm's
slot. A counter kept beside the records would have to follow every write, and not every write is
the operator's: a worker writes its own heartbeat and outcome, with a command of its choosing. Redis
itself knows what each key holds, so a stale writer, a worker that writes around the scripts, a
``records forget`` or a retention sweep are all in the next measure, and nothing any writer does
can lower it below what is stored.

What is counted: each measured key's whole size as Redis reports it (field names, values, and
Redis's own overhead per entry and per key), so the figure is never under the bytes of the records
themselves. ``SAMPLES 0`` walks every entry: Redis's default samples five and multiplies, which
under-counts a hash of mostly small records with a few 64 KiB captures tenfold. The walk is O(entries
of the swarm), about 35 ms for 100,000 entries of 500 bytes, so a launch reads a recent measure
(:mod:`agentihooks_swarm.lifecycle.quota`) instead of measuring each time.
"""

from __future__ import annotations

from typing import Final

from agentihooks_swarm.storage import connection
from agentihooks_swarm.storage.keys import (
    BUDGET,
    FINGERPRINTS,
    FINGERPRINTS_SEEN,
    FORGOTTEN,
    FORGOTTEN_INDEX,
    RECORDS,
    REFUSALS,
    RETENTION_INDEX,
)

#: Every key of a swarm that grows with its Executions: the records of each execution (the spec's
#: hashes, the owners and the journal), the retention index, the tombstones of forgotten ones, and
#: its refusals, fingerprints and budget (bounded, but still the swarm's).
MEASURED: Final = (
    *RECORDS,
    RETENTION_INDEX,
    FORGOTTEN,
    FORGOTTEN_INDEX,
    FINGERPRINTS,
    FINGERPRINTS_SEEN,
    REFUSALS,
    BUDGET,
)


async def stored_bytes(store: connection.Connection, *, slug: str) -> int:
    """The bytes Redis uses for swarm ``slug``'s keys now (0 for a swarm with none).

    Raises :class:`~agentihooks_swarm.errors.StoreUnavailable` when Redis cannot be reached or
    refuses ``MEMORY USAGE`` (a managed Redis may not allow it).
    """
    replies = await store._pipeline(  # The slot's own server, on a cluster too.
        slug=slug,
        commands=[("MEMORY", "USAGE", store.key(slug, name), "SAMPLES", 0) for name in MEASURED],
        durable=False,
    )
    return sum(int(reply) for reply in replies if reply is not None)
