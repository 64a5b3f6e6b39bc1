"""What a Swarm's status says about its refused workers: ``status.refusals`` and ``Degraded``.

Every ``interval`` seconds the leader lists its Swarms and, for each, reads its refusals from Redis
(the count in the last hour, the most frequent fingerprints) and evaluates its refusal budget
(:meth:`storage.refusals.Refusals.budget`: the same evaluation, and the same state, as the launches'), then
writes the status when it changed: ``refusals`` and the condition ``Degraded`` (reason
``RefusalBudgetExceeded`` while the budget holds new Executions back). The moment it trips, a
Warning Event says so on the Swarm. The gauges behind the alert and the dashboard's table of
fingerprints follow.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from agentihooks_swarm import errors, metrics as metrics_, records, resources, text
from agentihooks_swarm.kubernetes import clients
from agentihooks_swarm.lifecycle import budget, events, status as status_
from agentihooks_swarm.storage import operations

logger = logging.getLogger(__name__)


#: The fingerprints a Swarm's status shows.
TOP: Final = 5
#: The window of ``status.refusals.lastHour``.
HOUR: Final = 3600
#: Swarms listed per request.
PAGE: Final = 200


def refusals(
    *, last_hour: int, top: list[records.FingerprintSummary], redactor: text.Redactor = text.DEFAULT
) -> dict[str, Any]:
    """``status.refusals``: the count in the last hour and the most frequent fingerprints, their
    text redacted (anyone who may read the Swarm reads it)."""
    return {
        "lastHour": last_hour,
        "top": [
            {
                "fingerprint": summary.fingerprint,
                "count": summary.count,
                "class": str(summary.failure_class or records.FailureClass.UNKNOWN),
                "text": text.printable(redactor.redact(summary.text), keep_newlines=False),
                "lastSeen": summary.last_seen,
                "example": summary.example.execution,
            }
            for summary in top[:TOP]
        ],
    }


def degraded(
    state: records.BudgetState | None, *, redactor: text.Redactor = text.DEFAULT
) -> status_.Condition:
    """The ``Degraded`` condition; its message quotes the fingerprint's text, redacted."""
    if state is None:
        return status_.condition(
            type_="Degraded", status=False, reason="WithinBudget", message="New Executions launch."
        )
    return status_.condition(
        type_="Degraded",
        status=True,
        reason="RefusalBudgetExceeded",
        message=f"{redactor.redact(status_.budget_message(state))}. New Executions wait (phase Blocked) "
        f"until the worker template changes or the annotation {status_.RESET_BUDGET_ANNOTATION} gets a "
        "new value.",
    )


@dataclasses.dataclass(kw_only=True)
class SwarmStatus:
    cluster: clients.Clients
    store: operations.AsyncStore
    metrics: metrics_.Metrics
    #: The namespaces served (empty: every namespace).
    namespaces: tuple[str, ...]
    holds: Callable[[], bool]
    interval: float
    #: This replica, as its Events name it.
    instance: str
    #: What each Swarm's status and Events are redacted with; it learns each Swarm's patterns.
    redactors: text.Redactors = dataclasses.field(default_factory=text.Redactors)

    async def run(self) -> None:
        """Refresh every Swarm's status every ``interval`` seconds while leading (a supervised task)."""
        while True:
            await asyncio.sleep(self.interval)
            if self.holds():
                await self.refresh_all()

    async def refresh_all(self) -> None:
        try:
            async for page in self.cluster.swarms.served_pages(
                namespaces=self.namespaces, field_selector="", limit=PAGE
            ):
                for swarm in page.get("items") or []:
                    await self.refresh(swarm)
        except (errors.ApiError, errors.StoreUnavailable) as e:
            logger.warning("Could not refresh the Swarms' refusals, the next round retries: %s", e)

    async def refresh(self, swarm: Mapping[str, Any]) -> None:
        """One Swarm: read its refusals and budget, and write its status if that changed."""
        metadata = swarm.get("metadata") or {}
        slug, namespace = str(metadata.get("name") or ""), str(metadata.get("namespace") or "")
        try:
            spec = resources.parse_swarm(name=slug, spec=swarm.get("spec"))
        except errors.InvalidResource:
            return  # Its launches say what is wrong with it.
        redactor = self.redactors.learn(namespace=namespace, slug=slug, patterns=spec.redaction.patterns)
        owner = await self.store.slugs.claim(slug=slug, namespace=namespace)
        if owner != namespace:
            await self._not_ours(swarm, owner=owner)
            return
        # The budget first: counts only grow between the reads, so the fingerprints read after it
        # hold at least the refusals that tripped it, and the status never says "exceeded" next to
        # a count below the budget.
        state = await self._budget(slug=slug, spec=spec, swarm=swarm)
        top = await self.store.refusals.fingerprints(slug=slug)
        last_hour = await self.store.refusals.since(slug=slug, seconds=HOUR)
        self._gauges(slug=slug, top=top, state=state)
        found = swarm.get("status")
        current: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        patch: dict[str, Any] = {}
        status_.put(patch, current, "refusals", refusals(last_hour=last_hour, top=top, redactor=redactor))
        if spec.refusal_budget is not None or any(
            isinstance(c, Mapping) and c.get("type") == "Degraded" for c in current.get("conditions") or []
        ):
            status_.set_condition(patch, current.get("conditions"), degraded(state, redactor=redactor))
        if _has_condition(current, "Invalid"):
            status_.set_condition(patch, current.get("conditions"), slug_ours())
        if not patch:
            return
        await self._patch(swarm, patch)
        if state is not None and "conditions" in patch and not _was_degraded(current):
            notes = events.Collected()
            notes.warning(reason="RefusalBudgetExceeded", message=status_.budget_message(state) + ".")
            await self._post(swarm, notes, redactor=redactor)

    async def _not_ours(self, swarm: Mapping[str, Any], *, owner: str) -> None:
        """A Swarm whose slug another namespace owns: it is told so, and shown nothing of theirs."""
        metadata = swarm.get("metadata") or {}
        slug, namespace = str(metadata.get("name") or ""), str(metadata.get("namespace") or "")
        found = swarm.get("status")
        current: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        patch: dict[str, Any] = {}
        status_.put(patch, current, "refusals", None)
        message = status_.slug_message(slug=slug, namespace=namespace, owner=owner) + "."
        invalid = status_.condition(type_="Invalid", status=True, reason="SlugInUse", message=message)
        status_.set_condition(patch, current.get("conditions"), invalid)
        if not patch:
            return
        await self._patch(swarm, patch)
        if "conditions" in patch and not _has_condition(current, "Invalid", status_value="True"):
            notes = events.Collected()
            notes.warning(reason="SlugInUse", message=message)
            await self._post(swarm, notes)

    async def _patch(self, swarm: Mapping[str, Any], patch: dict[str, Any]) -> None:
        metadata = swarm.get("metadata") or {}
        await self.cluster.swarms.patch_status(
            namespace=str(metadata.get("namespace") or ""),
            name=str(metadata.get("name") or ""),
            uid=str(metadata.get("uid")),
            status=patch,
        )

    async def _post(
        self, swarm: Mapping[str, Any], notes: events.Collected, *, redactor: text.Redactor | None = None
    ) -> None:
        metadata = swarm.get("metadata") or {}
        involved = {
            "apiVersion": f"{resources.GROUP}/{resources.VERSION}",
            "kind": "Swarm",
            "name": str(metadata.get("name") or ""),
            "namespace": str(metadata.get("namespace") or ""),
            "uid": str(metadata.get("uid")),
        }
        await events.post(
            client=self.cluster.events,
            involved=involved,
            notes=notes,
            instance=self.instance,
            redactor=redactor or self.redactors.base,
        )

    async def _budget(
        self, *, slug: str, spec: resources.SwarmSpec, swarm: Mapping[str, Any]
    ) -> records.BudgetState | None:
        if spec.refusal_budget is None:
            return None
        verdict, state = await budget.verdict(
            store=self.store, slug=slug, budget=spec.refusal_budget, swarm=swarm
        )
        if verdict == "cleared":
            logger.info("The refusal budget of swarm %s is cleared (a new template, or its reset).", slug)
        return state if verdict == "tripped" else None

    def _gauges(
        self, *, slug: str, top: list[records.FingerprintSummary], state: records.BudgetState | None
    ) -> None:
        self.metrics.refusal_budget_exceeded.labels(swarm=slug).set(1 if state is not None else 0)
        gauge = self.metrics.top_fingerprints
        held = [sample.labels for metric in gauge.collect() for sample in metric.samples]
        for labels in [held_labels for held_labels in held if held_labels.get("swarm") == slug]:
            gauge.remove(*(labels[name] for name in ("swarm", "rank", "fingerprint", "class")))
        for rank, summary in enumerate(top[:TOP], start=1):
            gauge.labels(
                swarm=slug,
                rank=str(rank),
                fingerprint=summary.fingerprint,
                **{"class": str(summary.failure_class or records.FailureClass.UNKNOWN)},
            ).set(summary.count)


def slug_ours() -> status_.Condition:
    """The Invalid condition once the Swarm's slug is its namespace's (only over an earlier one)."""
    return status_.condition(
        type_="Invalid", status=False, reason="Accepted", message="The Swarm's name is this namespace's."
    )


def _has_condition(status: Mapping[str, Any], type_: str, *, status_value: str | None = None) -> bool:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == type_:
            return status_value is None or condition.get("status") == status_value
    return False


def _was_degraded(status: Mapping[str, Any]) -> bool:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Degraded":
            return condition.get("status") == "True"
    return False
