"""Records as the operator stores them in Redis, built with option arguments instead of pasted
constructors, for the tests that write them (to judge a restore, a sweep, a forget) or compare them;
and the operator's counters by label, as a test reads them from its ``Metrics``."""

from __future__ import annotations

from collections.abc import Sequence

from agentihooks_swarm import metrics, records


def capture(line: str) -> records.StartupCapture:
    """A refused worker's capture: its one container ``w`` exited 3 and logged ``line``."""
    return records.StartupCapture(
        phase="Failed",
        reason="",
        containers=[records.ContainerCapture(name="w", terminated={"exitCode": 3}, log=f"{line}\n")],
    )


def final(
    *,
    execution: str,
    state: records.FinalState = records.FinalState.FAILED,
    generation: int = 1,
    outcome: str = "attempt-outcomes",
    at: str | None = None,
) -> records.FinalRecord:
    """``execution``'s final record (its transcript never reported: ``transcript_end`` 0)."""
    return records.FinalRecord(
        execution=execution, generation=generation, state=state, transcript_end=0, outcome=outcome, at=at
    )


def retained(
    *,
    execution: str,
    pods: Sequence[records.RemovedObject] = (),
    watermark: int = 0,
    state: records.FinalState = records.FinalState.FAILED,
    outcome: str = "attempt-outcomes",
) -> records.Retained:
    """``execution``'s retained record, its transcript archived, ``pods`` removed."""
    return records.Retained(
        execution=execution,
        final=final(execution=execution, state=state, outcome=outcome),
        watermark=watermark,
        archived=True,
        removed=records.RemovedObjects(pods=list(pods)),
    )


def journal(
    *,
    execution: str,
    pods: Sequence[records.PinnedObject] = (),
    removed: Sequence[records.RemovedObject] = (),
    version: int | None = None,
) -> records.Journal:
    """``execution``'s cleanup journal entry: ``pods`` pinned, ``removed`` done with."""
    return records.Journal(
        version=version,
        execution=execution,
        generation=1,
        pinned=records.Objects(pods=list(pods)),
        removed=records.RemovedObjects(pods=list(removed)),
    )


def counted(collector: metrics.Metrics, *, name: str, label: str) -> dict[str, float]:
    """Counter ``name``'s totals by the value of its ``label`` (only the series counted so far)."""
    return {
        sample.labels[label]: sample.value
        for family in collector.registry.collect()
        if family.name == name
        for sample in family.samples
        if sample.name.endswith("_total")
    }
