"""The spec's proof, with the operator running: a refused worker's evidence outlives its Pod."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels
from tests.support import builders, planting, watching
from tests.support.fixtures_scene import Scene
from tests.support.read_commands import READ_STARTUP
from tests.support.redis_server import free_port

PLANTED = planting.PLANTED


def check_startup_record(record: dict[str, Any], *, slug: str, execution: str) -> None:
    """Launch removal's capture of the planted refused worker, as the spec's read command prints it."""
    startup = record["startup"]
    assert startup["phase"] == "Failed"
    [container] = startup["containers"]
    assert container["terminated"]["exitCode"] == 78
    assert container["terminated"]["reason"] == "Error"
    assert container["log"].endswith(" worker startup refused: planted kind refusal\n")
    assert record["labels"] == labels.attempt(slug=slug, execution=execution, generation=1)
    assert startup["class"] == "exit_code"  # Additive (issue 12), next to the spec's fields.


def check_launch_metrics(port: int) -> None:
    """The operator's metrics count the one launch removal: captured, refused, removed."""
    scraped = _scrape(port)
    assert scraped['agentihooks_swarm_captures_total{path="launch",result="stored"}'] == 1.0
    assert scraped['agentihooks_swarm_hands_total{reason="project_unpermitted"}'] == 1.0
    assert scraped['agentihooks_swarm_pods_removed_total{outcome="removed",path="launch"}'] == 1.0
    assert scraped['agentihooks_swarm_startup_failures_total{class="exit_code",path="launch"}'] == 1.0


@pytest.mark.compat  # also on the oldest Kubernetes the chart allows (make test-compat)
async def test_refused_worker_evidence_outlives_the_pod(scene: Scene) -> None:
    slug, execution = "proof", "refused-1"
    # Before the operator runs: its Execution, and the worker Pod a launch that stopped before
    # recording its hand leaves (owned by the Execution, refused at startup: Failed).
    await scene.swarm(name=slug, projects=["registered"])
    await scene.execution(name=execution, swarm=slug, project="outside-the-registration")
    pod_name = await planting.plant_refused_worker(
        scene.api, scene.cluster, namespace=scene.namespace, slug=slug, execution=execution
    )
    metrics_port = free_port()
    process = scene.start(env={"AGENTIHOOKS_SWARM_METRICS_PORT": str(metrics_port)})

    async def refused() -> dict[str, Any] | None:
        status = await scene.status(execution)
        return status if status.get("hand") else None

    status = await scene.until(refused, what="the hand result", process=process)
    planting.assert_removed_unpermitted(status["hand"])
    assert status["phase"] in ("Refused", "Done")
    await scene.until(
        lambda: _absent(scene.api, scene.namespace, pod_name),
        what="the refused pod to be gone",
        process=process,
    )

    read = await scene.python("-c", READ_STARTUP, slug, execution)
    record = json.loads(read.stdout)
    check_startup_record(record, slug=slug, execution=execution)
    pretty = await scene.python("-m", "agentihooks_swarm", "records", "startup", slug, execution)
    assert json.loads(pretty.stdout) == record
    assert pretty.stdout.startswith("{\n  ")
    await asyncio.to_thread(check_launch_metrics, metrics_port)

    finished = await scene.until_phase(execution, "Done", process=process, timeout=30)
    assert finished["failureClass"] == "exit_code"  # From launch removal's record.
    seen = await watching.eventually(
        lambda: _reasons(scene.api, scene.namespace, execution, "StartupRefused"),
        what="a StartupRefused event",
    )
    assert any(
        "class exit_code: container worker exited 78 (Error)" in message and "planted kind refusal" in message
        for message in seen
    )


async def test_records_command_says_when_there_is_no_record(scene: Scene) -> None:
    missing = await scene.python(
        "-m", "agentihooks_swarm", "records", "startup", "proof", "never-ran", check=False
    )
    assert missing.returncode == 1
    assert "No launch removal's capture for execution 'never-ran' of swarm 'proof'" in missing.stderr


async def test_invalid_executions_get_a_condition_not_a_crash_loop(scene: Scene) -> None:
    process = scene.start()
    # A name too long for swarm-worker-<name>-<generation> is refused at admission (the CRD);
    # the operator's own check (InvalidSpec) stays for objects admitted before the CRD said so.
    long_name = "a" * 41
    with pytest.raises(client.ApiException) as refused:
        await watching.create(
            scene.api, builders.execution(name=long_name, namespace=scene.namespace, swarm="x")
        )
    assert refused.value.status == 422
    assert "metadata.name" in str(refused.value.body) and "40" in str(refused.value.body)
    await scene.execution(name="orphan", swarm="no-such-swarm")
    missing = await scene.until(
        lambda: scene.condition("orphan", "SwarmFound"), what="SwarmFound", process=process
    )
    assert (missing["status"], missing["reason"]) == ("False", "SwarmNotFound")
    assert "does not exist" in missing["message"]
    assert process.running


async def _absent(api: client.ApiClient, namespace: str, name: str) -> bool:
    return not await watching.pod_exists(api, namespace=namespace, name=name)


async def _reasons(api: client.ApiClient, namespace: str, name: str, reason: str) -> list[str] | None:
    found = [m for _, r, m in await watching.events_for(api, namespace=namespace, name=name) if r == reason]
    return found or None


def _scrape(port: int) -> dict[str, float]:
    """The operator's Prometheus metrics, as ``{series: value}``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    series = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            series[name] = float(value)
    return series
