"""The Execution's status answers (status.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from agentihooks_swarm import errors, records, resources
from agentihooks_swarm.lifecycle import status
from tests.support import crds

REJECTED = errors.SpecRejected(
    kind="Pod",
    namespace="ns",
    name="swarm-worker-e1-1",
    detail="422 Invalid: spec.securityContext.runAsUser: Invalid value: -1",
)


def test_a_refused_pod_is_invalid_names_the_pod_and_quotes_the_api_server() -> None:
    answer = status.rejected(REJECTED, swarm_stamp="uid-1/3")
    assert answer.phase == "Invalid"
    [condition] = answer.conditions
    assert set(condition) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert (condition["type"], condition["status"], condition["reason"]) == ("Invalid", "True", "PodRejected")
    assert condition["message"].startswith(
        "The API server refused Pod ns/swarm-worker-e1-1: 422 Invalid: spec.securityContext.runAsUser"
    )
    assert "Fix the Swarm's worker template" in condition["message"]
    assert answer.fields == {"rejectedWith": "uid-1/3"}


def test_apply_writes_only_what_changed_and_keeps_other_conditions() -> None:
    current: dict[str, Any] = {"phase": "Pending", "conditions": [status.recorded()]}
    patch: dict[str, Any] = {}
    status.apply(patch, current, status.rejected(REJECTED, swarm_stamp="u/1"))
    assert set(patch) == {"phase", "conditions", "rejectedWith"}
    assert [c["type"] for c in patch["conditions"]] == ["Recorded", "Invalid"]
    again: dict[str, Any] = {}
    status.apply(again, {**current, **patch}, status.rejected(REJECTED, swarm_stamp="u/1"))
    assert again == {}  # The same answer twice costs no PATCH.


def test_a_launch_after_a_refusal_clears_it() -> None:
    earlier = [status.rejected(REJECTED, swarm_stamp="u/1").conditions[0]]
    hand = records.HandResult(generation=1, handed=True, pod="swarm-worker-e1-1", terminal=False)
    answer = status.handed(hand, earlier=earlier)
    assert answer.phase == "Running"
    assert [(c["type"], c["status"], c["reason"]) for c in answer.conditions] == [
        ("Handed", "True", "Handed"),
        ("Invalid", "False", "Accepted"),
    ]
    patch: dict[str, Any] = {}
    status.apply(patch, {"phase": "Invalid", "rejectedWith": "u/1", "conditions": earlier}, answer)
    assert patch["rejectedWith"] is None  # Removed by the merge patch.
    hand_fields = {"handed": True, "reason": None, "removed": None, "podUid": None, "terminal": False}
    assert patch["hand"] == hand_fields


def test_a_refused_hand_quotes_the_refusal() -> None:
    hand = records.HandResult(
        generation=1,
        handed=False,
        reason=records.HandReason.CONFIG_MAP_REFUSED,
        removed=True,
        pod="swarm-worker-e1-1",
    )
    detail = "the API server refused ConfigMap ns/swarm-grant-e1-1: 422 Invalid: data: Too long"
    [condition] = status.handed(hand, detail=detail).conditions
    assert condition["reason"] == "config_map_refused"
    assert condition["message"] == (
        f"Worker pod swarm-worker-e1-1: hand refused (config_map_refused), removed: true; {detail}"
    )


@pytest.mark.parametrize(
    ("current", "stamp", "stale"),
    [
        ({"phase": "Invalid", "rejectedWith": "u/1"}, "u/2", True),
        ({"phase": "Invalid", "rejectedWith": "u/1"}, "v/1", True),  # Deleted and created again.
        ({"phase": "Invalid", "rejectedWith": "u/1"}, "u/1", False),  # Refused for this very version.
        ({"phase": "Invalid"}, "u/2", False),  # Its own spec is invalid: only its spec can fix it.
        ({"phase": "Running", "rejectedWith": "u/1", "hand": {"handed": True}}, "u/2", False),
    ],
)
def test_only_a_pod_refused_for_an_older_swarm_is_relaunched(
    current: dict[str, Any], stamp: str, stale: bool
) -> None:
    assert status.stale_rejection(current, swarm_stamp=stamp) is stale


def test_a_task_too_large_for_the_grant_is_invalid_before_anything_is_created() -> None:
    fits = "x" * (resources.MAX_TASK_BYTES - 2)
    assert (
        resources.parse_execution(name="e1", spec={"swarm": "s", "project": "p", "task": fits}).task == fits
    )
    with pytest.raises(errors.InvalidResource, match=r"spec\.task takes 1000001 bytes as JSON"):
        resources.parse_execution(name="e1", spec={"swarm": "s", "project": "p", "task": fits + "x"})
    # Measured as the grant stores it: UTF-8, so a character may take up to 4 bytes.
    with pytest.raises(errors.InvalidResource, match=r"spec\.task takes"):
        resources.parse_execution(
            name="e1", spec={"swarm": "s", "project": "p", "task": {"t": "\U0001f4a5" * 250_000}}
        )


def test_the_crds_name_limits_are_the_operators() -> None:
    def name_schema(path: str) -> dict[str, Any]:
        crd = yaml.safe_load((crds.CRDS / path).read_text())
        schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        return dict(schema["properties"]["metadata"]["properties"]["name"])

    execution = name_schema("swarm.agentihooks.io_executions.yaml")
    swarm = name_schema("swarm.agentihooks.io_swarms.yaml")
    resources.parse_execution(name="a" * execution["maxLength"], spec={"swarm": "s", "project": "p"})
    with pytest.raises(errors.InvalidResource):
        resources.parse_execution(
            name="a" * (execution["maxLength"] + 1), spec={"swarm": "s", "project": "p"}
        )
    resources.parse_swarm(name="a" * swarm["maxLength"], spec={"worker": {"image": "i"}})
    with pytest.raises(errors.InvalidResource):
        resources.parse_swarm(name="a" * (swarm["maxLength"] + 1), spec={"worker": {"image": "i"}})
    longest = f"swarm-terminal-{'a' * execution['maxLength']}-1"
    assert len(longest) <= 63


def _essence(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"annotations": annotations or {}}, "spec": spec}


def test_a_launch_that_may_pass_is_pending_with_the_error_and_cleared_by_the_launch() -> None:
    error = errors.ApiRefused(
        'create pod ns/swarm-worker-e1-1: 403 Forbidden: serviceaccount "x" not found', status=403
    )
    answer = status.launch_failed(error, retry_seconds=10)
    assert answer.phase == "Pending"
    [condition] = answer.conditions
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Launched",
        "False",
        "LaunchFailed",
    )
    assert condition["message"].endswith('serviceaccount "x" not found; retrying every 10s')
    hand = records.HandResult(generation=1, handed=True, pod="swarm-worker-e1-1")
    after = status.handed(hand, earlier=[condition])
    assert [(c["type"], c["status"]) for c in after.conditions] == [("Handed", "True"), ("Launched", "True")]
