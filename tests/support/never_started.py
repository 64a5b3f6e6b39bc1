"""A worker that never starts, played with the operator running: it ends with a record that says
why, with its class, and no Pod left behind (issue 12's proof). Played on kwok by ``tests/e2e`` and
on a real node by ``tests/realnode``; the scenarios are ``tests/support/scenarios.py``, their node
side played by a :class:`~tests.support.scenarios.Kubelet`."""

from __future__ import annotations

import datetime
from typing import Any

from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels
from tests.support import builders, scenarios, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory
from tests.support.operator_process import OperatorProcess

SLUG = "never"


async def play(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
    kubelet: scenarios.Kubelet,
    scenario: scenarios.Scenario,
) -> None:
    """Run ``scenario`` with the operator and check its record, on whichever node ``kubelet`` is."""
    assert kubelet.plays(scenario), f"{scenario.name} cannot be played by {type(kubelet).__name__}"
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    pod = await _launched(admin_api, namespace=namespace, kubelet=kubelet, scenario=scenario, process=process)
    name = pod["metadata"]["name"]

    async def done() -> dict[str, Any] | None:
        found: dict[str, Any] = (
            await watching.execution(admin_api, namespace=namespace, name=scenario.name)
        ).get("status") or {}
        return found if found.get("phase") == "Done" else None

    status = await watching.eventually(done, what=f"{scenario.name} Done", operator=process, timeout=90)
    assert not await watching.pod_exists(admin_api, namespace=namespace, name=name)
    assert status["outcome"] == "failed"
    assert status["failureClass"] == scenario.failure_class
    record = await _retained_record(redis_url, pod=pod, status=status, scenario=scenario)
    _check_record(record, kubelet=kubelet, scenario=scenario)
    await _check_events(admin_api, namespace=namespace, scenario=scenario, process=process)


async def _launched(
    admin_api: client.ApiClient,
    *,
    namespace: str,
    kubelet: scenarios.Kubelet,
    scenario: scenarios.Scenario,
    process: OperatorProcess,
) -> dict[str, Any]:
    """The Swarm and the Execution created; the worker Pod once the operator made it, reported on
    by ``kubelet`` as its node would."""
    swarm = builders.swarm(
        name=SLUG,
        namespace=namespace,
        image=kubelet.image(scenario),
        command=kubelet.command(scenario),
        env=scenario.env,
        resources=scenario.resources,
        annotations=kubelet.annotations(scenario),
        startup_deadline_seconds=scenario.startup_deadline_seconds,
    )
    await watching.create(admin_api, swarm)
    await watching.create(admin_api, builders.execution(name=scenario.name, namespace=namespace, swarm=SLUG))
    name = labels.worker_pod_name(execution=scenario.name, generation=1)
    core = client.CoreV1Api(admin_api)

    async def created() -> dict[str, Any] | None:
        try:
            found = await core.read_namespaced_pod(name, namespace)
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise
        result: dict[str, Any] = admin_api.sanitize_for_serialization(found)
        return result

    pod = await watching.eventually(created, what=f"pod {name}", operator=process)
    await kubelet.report(admin_api, pod=pod, scenario=scenario)
    return pod


async def _retained_record(
    redis_url: str, *, pod: dict[str, Any], status: dict[str, Any], scenario: scenarios.Scenario
) -> dict[str, Any]:
    """The Pod's entry in ``attempt-retained``: its capture when it was refused, else the final
    record's evidence (the Pod deleted without a capture, as the spec says)."""
    retained = await watching.stored(redis_url, slug=SLUG, name="attempt-retained", execution=scenario.name)
    [entry] = retained["removed"]["pods"]
    name = pod["metadata"]["name"]
    assert (entry["name"], entry["uid"], entry["outcome"]) == (name, pod["metadata"]["uid"], "deleted")
    if scenario.captured:
        record: dict[str, Any] = entry["startup"]
        assert "reason" not in retained["final"] and "evidence" not in retained["final"]
        return record
    assert "startup" not in entry  # Not refused: deleted as the spec says, without a capture.
    assert retained["final"]["reason"] == scenario.reason
    record = retained["final"]["evidence"]
    assert status["reason"] == scenario.reason
    [scheduled] = [c for c in record["conditions"] if c["type"] == "PodScheduled"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    return record


def _check_record(
    record: dict[str, Any], *, kubelet: scenarios.Kubelet, scenario: scenarios.Scenario
) -> None:
    assert record["class"] == scenario.failure_class
    assert record["reason"] == (scenario.reason if scenario.captured else "")
    # The spec's fields, unchanged: containers lists terminated containers only.
    assert {"phase", "reason", "containers"} <= set(record)
    assert all("terminated" in c for c in record["containers"])
    if kubelet.waiting_reasons(scenario):
        # The waiting state when the deadline was set is noted on the Pod and captured: a real
        # kubelet that then fails the Pod reports the container terminated (ContainerStatusUnknown,
        # never started, no log), kwok leaves it waiting.
        [noted] = [w["state"]["waiting"]["reason"] for w in record["waiting_at_deadline"]]
        assert noted in kubelet.waiting_reasons(scenario), record["waiting_at_deadline"]
        live = [w["state"]["waiting"]["reason"] for w in record.get("waiting", [])]
        assert set(live) <= kubelet.waiting_reasons(scenario), record
        for container in record["containers"]:
            assert (container["terminated"]["reason"], container["terminated"]["startedAt"]) == (
                "ContainerStatusUnknown",
                None,
            ), container
            assert container["log_error"]["cause"] == "not_started", container
            assert "log" not in container
    if scenario.event_reason:
        assert scenario.event_reason in [e["reason"] for e in record["events"]]
        last_times = [datetime.datetime.fromisoformat(e["last_time"]) for e in record["events"]]
        assert last_times == sorted(last_times, reverse=True)  # Newest first (as times, not strings).
    for event in kubelet.events(scenario):
        assert {
            "type": event.type,
            "reason": event.reason,
            "message": event.message,
            "count": event.count,
        } in [{k: e[k] for k in ("type", "reason", "message", "count")} for e in record["events"]]


async def _check_events(
    admin_api: client.ApiClient, *, namespace: str, scenario: scenarios.Scenario, process: OperatorProcess
) -> None:
    """The Events the operator posted on the Execution: why it ended, and the cleanup (told in the
    ``AttemptFinal`` of the step that made the attempt final and cleaned it up)."""
    expected = {"AttemptFinal", "StartupDeadlineExceeded" if scenario.captured else "Unschedulable"}
    if scenario.captured and scenario.startup_deadline_seconds is None:
        expected.discard("StartupDeadlineExceeded")
    found = await watching.events_once(
        admin_api, namespace=namespace, name=scenario.name, reasons=expected, operator=process
    )
    reasons = {r: m for _, r, m in found}
    if scenario.startup_deadline_seconds is not None and scenario.captured:
        assert "StartupDeadlineExceeded" in reasons, reasons
        assert f"within {scenario.startup_deadline_seconds}s" in reasons["StartupDeadlineExceeded"]
    if not scenario.captured:
        assert "Unschedulable" in reasons, reasons
    cleaned = reasons.get("CleanupFinished") or reasons["AttemptFinal"]
    assert "cleaned up (" in cleaned, reasons
    assert f"(class {scenario.failure_class})" in cleaned or not scenario.captured
