"""The CRDs' status schemas name every status field the operator writes, so the custom resources
reference (generated from them) lists each one with what it means."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from agentihooks_swarm import errors, records
from agentihooks_swarm.lifecycle import model, status
from agentihooks_swarm.swarm import status as swarm_status
from tests.support import crds


def schema(kind: str) -> Mapping[str, Any]:
    crd = yaml.safe_load((crds.CRDS / f"swarm.agentihooks.io_{kind}.yaml").read_text())
    found: Mapping[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    return found


def paths(value: Any, node: Mapping[str, Any], prefix: str = "status") -> Iterator[str]:
    """Each field of ``value`` (a written status), as a path; a field the schema does not name is
    yielded with a ``!`` so the assertion names it."""
    if isinstance(value, Mapping):
        for key, child in value.items():
            if "properties" in node:
                known = node["properties"].get(key)
                if known is None:
                    yield f"{prefix}.{key}!"
                    continue
                yield f"{prefix}.{key}"
                yield from paths(child, known, f"{prefix}.{key}")
    elif isinstance(value, list) and "items" in node:
        for item in value:
            yield from paths(item, node["items"], prefix + "[]")


def execution_patches() -> list[dict[str, Any]]:
    hand = records.HandResult(
        generation=1,
        handed=False,
        reason=records.HandReason.PROJECT_UNPERMITTED,
        removed=True,
        pod="swarm-worker-e-1",
    )
    final = records.FinalRecord(execution="e", generation=1, state=records.FinalState.REFUSED, outcome="o")
    retained = records.Retained(
        execution="e",
        final=final,
        watermark=0,
        archived=True,
        removed=records.RemovedObjects(
            pods=[records.RemovedObject(name="swarm-worker-e-1", uid="u", outcome="deleted")],
            services=[records.RemovedObject(name="swarm-terminal-e-1", uid="v", outcome="absent")],
        ),
    )
    progress = model.Progress(
        phase=model.Phase.DONE,
        outcome="refused",
        waiting_for="the worker to finish",
        retained=retained,
        reason="Unschedulable",
        failure_class="unschedulable",
    )
    rejected = errors.SpecRejected(kind="Pod", namespace="n", name="swarm-worker-e-1", detail="422")
    patches: list[dict[str, Any]] = []
    for answer in (
        status.handed(hand),
        status.worker_not_allowed(swarm="s", violations="v", swarm_stamp="u/1"),
        status.rejected(rejected, swarm_stamp="u/1"),
    ):
        patch: dict[str, Any] = {}
        status.apply(patch, {}, answer)
        patches.append(patch)
    patch = dict(status.observed(generation=1, relaunch="again"))
    status.progress(patch, {}, progress)
    status.set_condition(patch, [], status.not_synced(RuntimeError("x")))
    patches.append(patch)
    return patches


def test_every_execution_status_field_the_operator_writes_is_in_the_crd() -> None:
    node = schema("executions")
    written = {path for patch in execution_patches() for path in paths(patch, node)}

    assert {path for path in written if path.endswith("!")} == set()
    # What the printer columns and the docs rely on is among them.
    assert {"status.attempt", "status.hand.removed", "status.outcome", "status.cleanup.pods"} <= written


def test_every_swarm_status_field_the_operator_writes_is_in_the_crd() -> None:
    summary = records.FingerprintSummary.model_validate(
        {
            "fingerprint": "ca0590c0d90b",
            "text": "<time> refused",
            "class": "exit_code",
            "count": 3,
            "first_seen": "2026-01-01T00:00:00Z",
            "last_seen": "2026-01-01T00:00:01Z",
            "example": {"execution": "e", "pod": "p", "uid": "u"},
        }
    )
    patch: dict[str, Any] = {"refusals": swarm_status.refusals(last_hour=3, top=[summary])}
    status.set_condition(patch, [], swarm_status.degraded(None))
    written = set(paths(patch, schema("swarms")))

    assert {path for path in written if path.endswith("!")} == set()
    assert "status.refusals.top[].lastSeen" in written
