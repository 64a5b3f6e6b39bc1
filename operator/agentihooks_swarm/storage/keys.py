"""Where the evidence lives in Redis: the hash names, their limits, and the key of each.

Every key is ``PREFIX:{SLUG}:NAME``. The braces make the slug a Redis Cluster hash tag, so all
hashes of one swarm sit in one slot and a script across them is legal on a cluster too. Each hash
is keyed by execution id. The names are the spec's; :mod:`agentihooks_swarm.store` shows them to
people, :mod:`.operations` writes them.
"""

from __future__ import annotations

import dataclasses
from typing import Final

STARTUP_DIAGNOSTICS: Final = "attempt-startup-diagnostics"
HANDS: Final = "attempt-hands"
FINALS: Final = "attempt-finals"
HEARTBEATS: Final = "attempt-heartbeats"
OUTCOMES: Final = "attempt-outcomes"
JOURNAL: Final = "cleanup-journal"
RETAINED: Final = "attempt-retained"
RETENTION_INDEX: Final = "retention-index"
#: Which Execution (by UID) an execution name's records belong to (additive, see records.Owner).
OWNERS: Final = "execution-owners"
#: Tombstones of forgotten lives (additive): ``NAME|UID`` (and ``NAME``, for records written
#: without an owner) for each execution whose records ``records forget`` or the retention sweep
#: removed, scored by when in ``forgotten-index``. A failover restore never writes a forgotten
#: life's record back (:mod:`failover`).
FORGOTTEN: Final = "forgotten"
FORGOTTEN_INDEX: Final = "forgotten-index"
#: How long a tombstone is kept: far past the restore's window (failover.SECONDS).
TOMBSTONE_SECONDS: Final = 86_400
#: Tombstones past their time removed by one forget or sweep, at most.
TOMBSTONES_PRUNED: Final = 100
#: The namespace whose swarm owns the slug (additive): a plain string, set once by the first
#: namespace to use the slug (:mod:`.slugs`), so that a swarm's records, fingerprints and budget
#: belong to one namespace while keys stay the spec's ``PREFIX:{SLUG}:NAME``.
NAMESPACE: Final = "namespace"
FINGERPRINTS: Final = "refusal-fingerprints"
FINGERPRINTS_SEEN: Final = "refusal-fingerprints-seen"
REFUSALS: Final = "refusals"
BUDGET: Final = "refusal-budget"
#: The fingerprints a swarm keeps (the oldest seen is dropped beyond), the recent refusals kept
#: (the oldest dropped beyond), and for how long (the longest budget window).
MAX_FINGERPRINTS: Final = 100
MAX_REFUSALS_KEPT: Final = 10_000
REFUSALS_HORIZON_SECONDS: Final = 86_400
#: The hashes the retention sweep removes an execution from (never the journal).
SWEPT: Final = (STARTUP_DIAGNOSTICS, HANDS, FINALS, HEARTBEATS, OUTCOMES, RETAINED, OWNERS)
#: Every hash that holds a record of an execution.
RECORDS: Final = (*SWEPT, JOURNAL)
#: The records only the operator writes, after the claim: a name with any of them (and no owner)
#: was used by an Execution of an earlier version. A worker's heartbeat or outcome is not one:
#: it reports for the attempt it was launched for, and only after that launch.
LAUNCHED: Final = (STARTUP_DIAGNOSTICS, HANDS, FINALS, RETAINED, JOURNAL)
#: Everything of a swarm that another namespace must never be shown: its records and refusals.
#: A slug is released only when none of them holds anything.
OWNED: Final = (*RECORDS, FINGERPRINTS, FINGERPRINTS_SEEN, REFUSALS, BUDGET)
#: Executions one sweep script call looks at, at most.
SWEEP_BATCH: Final = 200


def key(prefix: str, slug: str, name: str) -> str:
    """The Redis key of hash ``name`` of swarm ``slug``."""
    return f"{prefix}:{{{slug}}}:{name}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Durability:
    """How many replicas must acknowledge an evidence write, and how long WAIT waits for them."""

    replicas: int = 0
    timeout_seconds: float = 2.0
