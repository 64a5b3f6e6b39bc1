"""A swarm's refusals by fingerprint, and its refusal budget, in Redis (additive to the spec).

``refusal-fingerprints`` keeps a summary per fingerprint (its count, when first and last seen, one
example), ``refusal-fingerprints-seen`` when each was last seen, ``refusals`` the recent refusals
themselves (for counts over a window), and ``refusal-budget`` the budget's state. Each is bounded:
the oldest fingerprint goes beyond :data:`keys.MAX_FINGERPRINTS`, refusals older than a day or
beyond :data:`keys.MAX_REFUSALS_KEPT` go.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from agentihooks_swarm import records
from agentihooks_swarm.storage import connection, scripts
from agentihooks_swarm.storage.keys import (
    BUDGET,
    FINGERPRINTS,
    FINGERPRINTS_SEEN,
    MAX_FINGERPRINTS,
    MAX_REFUSALS_KEPT,
    REFUSALS,
    REFUSALS_HORIZON_SECONDS,
)

_NOTE_REFUSAL: Final = scripts.load("note_refusal")
_BUDGET: Final = scripts.load("budget")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Refusals:
    """The refusal operations, on the store's connection (one round trip each)."""

    connection: connection.Connection

    async def note(
        self, *, slug: str, capture: records.StartupCapture, example: records.Example, at: str
    ) -> bool:
        """Count a refused Pod's capture under its fingerprint (once per Pod UID); whether it was new."""
        if not capture.fingerprint:
            return False
        summary = records.FingerprintSummary.model_validate(
            {
                "fingerprint": capture.fingerprint,
                "text": capture.fingerprint_text or "",
                "class": capture.failure_class,
                "count": 1,
                "first_seen": at,
                "last_seen": at,
                "example": example,
            }
        )
        with connection.translated():
            noted = await self.connection.redis.eval(
                _NOTE_REFUSAL,
                3,
                self.connection.key(slug, FINGERPRINTS),
                self.connection.key(slug, FINGERPRINTS_SEEN),
                self.connection.key(slug, REFUSALS),
                capture.fingerprint,
                int(self.connection.clock()),
                at,
                f"{capture.fingerprint}|{example.uid}",
                records.dump(summary),
                MAX_FINGERPRINTS,
                REFUSALS_HORIZON_SECONDS,
                MAX_REFUSALS_KEPT,
            )
        return bool(noted)

    async def fingerprints(self, *, slug: str) -> list[records.FingerprintSummary]:
        """The swarm's fingerprints, the most counted first."""
        with connection.translated():
            found = await self.connection.redis.hgetall(self.connection.key(slug, FINGERPRINTS))
        summaries = [records.load(records.FingerprintSummary, raw) for raw in found.values()]
        return sorted(summaries, key=lambda s: (-s.count, s.last_seen))

    async def since(self, *, slug: str, seconds: float) -> int:
        """Refused Pods counted in the last ``seconds``."""
        with connection.translated():
            found = await self.connection.redis.zcount(
                self.connection.key(slug, REFUSALS), f"({self.connection.clock() - seconds}", "+inf"
            )
        return int(found)

    async def budget(
        self,
        *,
        slug: str,
        window_seconds: int,
        max_refusals: int,
        same_fingerprint: bool,
        template: str,
        reset: str,
        at: str,
    ) -> tuple[str, records.BudgetState | None]:
        """Evaluate a swarm's refusal budget (``_BUDGET``): ``('tripped', state)``, ``('cleared',
        the state it had)`` or ``('ok', None)``. The state lives in Redis: every replica agrees."""
        with connection.translated():
            reply = await self.connection.redis.eval(
                _BUDGET,
                3,
                self.connection.key(slug, REFUSALS),
                self.connection.key(slug, BUDGET),
                self.connection.key(slug, FINGERPRINTS),
                self.connection.clock(),
                at,
                window_seconds,
                max_refusals,
                "1" if same_fingerprint else "",
                template,
                reset,
            )
        verdict = str(reply[0])
        state = records.load(records.BudgetState, reply[1]) if len(reply) > 1 else None
        return verdict, state
