"""A Swarm's refusal budget, as a launch and the Swarm's status read it.

The budget's state lives in Redis (:mod:`agentihooks_swarm.storage.refusals`), so every replica
agrees; what clears a tripped budget (the worker template, the reset annotation) is read from the
Swarm object here, in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentihooks_swarm import records, resources
from agentihooks_swarm.lifecycle import finals, status as status_
from agentihooks_swarm.storage import operations


async def verdict(
    *, store: operations.AsyncStore, slug: str, budget: resources.RefusalBudget, swarm: Mapping[str, Any]
) -> tuple[str, records.BudgetState | None]:
    """The Swarm's refusal budget as Redis holds it now (:meth:`storage.refusals.Refusals.budget`), from the
    Swarm object itself: its worker template and its reset annotation are what clear it. The
    launch and the Swarm's status both ask here, so they judge by the same inputs."""
    return await store.refusals.budget(
        slug=slug,
        window_seconds=budget.window_seconds,
        max_refusals=budget.max_refusals,
        same_fingerprint=budget.same_fingerprint,
        template=resources.template_digest(swarm),
        reset=resources.reset_stamp(swarm, reset_annotation=status_.RESET_BUDGET_ANNOTATION),
        at=finals.timestamp(finals.now()),
    )
