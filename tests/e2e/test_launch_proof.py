"""The spec's proof, with the operator running: a refused worker's evidence outlives its Pod."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels
from tests.support import builders, planting, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory
from tests.support.redis_server import free_port

PLANTED = planting.PLANTED

#: The spec's first read command, with this package's module path.
READ_STARTUP = """
import sys
from agentihooks_swarm.store import connect
store = connect()
print(store.redis.hget(store.key(sys.argv[1], "attempt-startup-diagnostics"), sys.argv[2]))
"""


async def test_refused_worker_evidence_outlives_the_pod(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
    redis_url: str,
) -> None:
    slug, execution = "proof", "refused-1"
    pod_name = await planting.plant_refused_worker(
        admin_api, control_plane, namespace=namespace, slug=slug, execution=execution
    )

    metrics_port = free_port()
    process = operator(
        kubeconfig=control_plane.kubeconfig,
        namespace=namespace,
        env={"AGENTIHOOKS_SWARM_METRICS_PORT": str(metrics_port)},
    )
    await watching.create(admin_api, builders.swarm(name=slug, namespace=namespace, projects=["registered"]))
    await watching.create(
        admin_api,
        builders.execution(
            name=execution, namespace=namespace, swarm=slug, project="outside-the-registration"
        ),
    )

    async def refused() -> dict[str, object] | None:
        status = (await watching.execution(admin_api, namespace=namespace, name=execution)).get(
            "status"
        ) or {}
        return status if status.get("hand") else None

    status = await watching.eventually(refused, what="the hand result", operator=process)
    assert status["hand"] == {"handed": False, "reason": "project_unpermitted", "removed": True}
    assert status["phase"] in ("Refused", "Done")
    await watching.eventually(
        lambda: _absent(admin_api, namespace, pod_name), what="the refused pod to be gone", operator=process
    )

    read = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", READ_STARTUP, slug, execution],
        env={"AGENTIHOOKS_SWARM_REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    record = json.loads(read.stdout)
    startup = record["startup"]
    assert startup["phase"] == "Failed"
    [container] = startup["containers"]
    assert container["terminated"]["exitCode"] == 78
    assert container["terminated"]["reason"] == "Error"
    assert container["log"].endswith(" worker startup refused: planted kind refusal\n")
    assert record["labels"] == labels.attempt(slug=slug, execution=execution, generation=1)

    pretty = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agentihooks_swarm", "records", "startup", slug, execution],
        env={"AGENTIHOOKS_SWARM_REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(pretty.stdout) == record
    assert pretty.stdout.startswith("{\n  ")

    scraped = await asyncio.to_thread(_scrape, metrics_port)
    assert scraped['agentihooks_swarm_captures_total{path="launch",result="stored"}'] == 1.0
    assert scraped['agentihooks_swarm_hands_total{reason="project_unpermitted"}'] == 1.0
    assert scraped['agentihooks_swarm_pods_removed_total{outcome="removed",path="launch"}'] == 1.0
    assert scraped['agentihooks_swarm_startup_failures_total{class="exit_code",path="launch"}'] == 1.0
    assert startup["class"] == "exit_code"  # Additive (issue 12), next to the spec's fields.

    async def done() -> dict[str, object] | None:
        status = (await watching.execution(admin_api, namespace=namespace, name=execution)).get(
            "status"
        ) or {}
        return status if status.get("phase") == "Done" else None

    finished = await watching.eventually(done, what="the refused attempt Done", operator=process)
    assert finished["failureClass"] == "exit_code"  # From launch removal's record.

    seen = await watching.eventually(
        lambda: _reasons(admin_api, namespace, execution, "StartupRefused"), what="a StartupRefused event"
    )
    assert any(
        "class exit_code: container worker exited 78 (Error)" in message and "planted kind refusal" in message
        for message in seen
    )


async def test_records_command_says_when_there_is_no_record(redis_url: str) -> None:
    missing = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agentihooks_swarm", "records", "startup", "proof", "never-ran"],
        env={"AGENTIHOOKS_SWARM_REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1
    assert "No launch removal's capture for execution 'never-ran' of swarm 'proof'" in missing.stderr


async def test_invalid_executions_get_a_condition_not_a_crash_loop(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorFactory,
) -> None:
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    # A name too long for swarm-worker-<name>-<generation> is refused at admission (the CRD);
    # the operator's own check (InvalidSpec) stays for objects admitted before the CRD said so.
    long_name = "a" * 41
    with pytest.raises(client.ApiException) as refused:
        await watching.create(admin_api, builders.execution(name=long_name, namespace=namespace, swarm="x"))
    assert refused.value.status == 422
    assert "metadata.name" in str(refused.value.body) and "40" in str(refused.value.body)
    await watching.create(
        admin_api, builders.execution(name="orphan", namespace=namespace, swarm="no-such-swarm")
    )

    async def condition(name: str, type_: str) -> dict[str, str] | None:
        status = (await watching.execution(admin_api, namespace=namespace, name=name)).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)

    missing = await watching.eventually(
        lambda: condition("orphan", "SwarmFound"), what="SwarmFound", operator=process
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
