"""Redaction and fingerprints that hold, with the operator run as users run it, on the real API
server and Redis: a refused worker that prints a bearer token, an AWS access key, a JWT and a
``postgres://user:password@`` URL shows none of them in its Events, the Swarm's status, ``/metrics``,
the operator's log or any ``records`` view (Redis keeps them, unless the store-redacted setting is
on: then Redis holds none of them either, and the record says so); and twelve refusals whose last
lines differ only in ids are one fingerprint, counted 12 in ``records top``."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any, Final

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.lifecycle import model
from tests.support import pods
from tests.support.fixtures_scene import Scene
from tests.support.operator_process import OperatorProcess
from tests.support.planting import as_the_operator_makes_it
from tests.support.redis_server import free_port

SLUG: Final = "leaky"
TOKEN: Final = "9f8e7d6c5b4a39281706f5e4d3c2b1a0Zq"
AWS_KEY: Final = "AKIAZ7QXPL3MN8RT2VW4"
JWT: Final = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ3b3JrZXIifQ.c2lnbmF0dXJlLXNlY3JldA"
DB_PASSWORD: Final = "Sup3rS3cretPw"
SECRETS: Final = (TOKEN, AWS_KEY, JWT, DB_PASSWORD)
LEAKY_LOG: Final = (
    f"connecting with Authorization: Bearer {TOKEN} and key {AWS_KEY}\n"
    f"worker startup refused: postgres://app:{DB_PASSWORD}@db.internal:5432/app rejected {JWT} "
    f"(Authorization: Bearer {TOKEN}, key {AWS_KEY})\n"
).encode()
VIEWS: Final = ("startup", "retained", "journal", "hand", "final")


async def plant(scene: Scene, *, name: str, log: bytes, share: str) -> None:
    """Before the operator runs: the Swarm (made once; it registers ``registered`` only), Execution
    ``name`` for a project outside it (its hand will be refused), and its worker Pod as a launch
    that stopped before recording its hand leaves it (owned by the Execution): Failed, exit 78, ``log``."""
    try:
        await scene.swarm(name=SLUG, projects=["registered"])
    except client.ApiException as e:
        if e.status != 409:
            raise
    await scene.execution(name=name, swarm=SLUG, project="outside")
    uid = (await scene.get(name))["metadata"]["uid"]
    attempt = model.Attempt(namespace=scene.namespace, slug=SLUG, execution=name, generation=1, owner_uid=uid)
    pod_name = attempt.pod_name
    await pods.plant_shared_log(
        cluster=scene.cluster, namespace=scene.namespace, pods=[pod_name], container="worker",
        content=log, share=share,
    )  # fmt: skip
    pod: Any = pods.worker_pod(
        name=pod_name,
        namespace=scene.namespace,
        phase="Failed",
        exit_code=78,
        reason="Error",
        labels=attempt.labels,
        **as_the_operator_makes_it(attempt),
    )
    await client.CoreV1Api(scene.api).create_namespaced_pod(scene.namespace, pod)
    await pods.wait_for_phase(scene.api, namespace=scene.namespace, name=pod_name, phase="Failed")


async def refused_and_counted(scene: Scene, *, names: list[str], process: OperatorProcess) -> dict[str, Any]:
    """Wait until ``names`` (planted: their hands are refused, their Pods captured) are all Done and
    counted, and return the Swarm's ``status.refusals``."""

    async def done() -> bool:
        return all([(await scene.status(n)).get("phase") == "Done" for n in names])

    await scene.until(done, what="every Execution Done", process=process, timeout=120)

    async def counted() -> dict[str, Any] | None:
        found = await client.CustomObjectsApi(scene.api).get_namespaced_custom_object(
            "swarm.agentihooks.io", "v1alpha1", scene.namespace, "swarms", SLUG
        )
        refusals = (found.get("status") or {}).get("refusals") or {}
        return dict(found["status"]) if refusals.get("lastHour") == len(names) else None

    status = await scene.until(counted, what="status.refusals", process=process)
    return status


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def assert_hidden(where: str, text: str) -> None:
    leaked = [secret for secret in SECRETS if secret in text]
    assert not leaked, f"{where} shows {leaked}"


@pytest.mark.parametrize("store_redacted", [False, True], ids=["stored-as-printed", "stored-redacted"])
async def test_secrets_a_refused_worker_printed_are_shown_nowhere(scene: Scene, store_redacted: bool) -> None:
    await plant(scene, name="leak", log=LEAKY_LOG, share="leak")
    port = free_port()
    env = {"AGENTIHOOKS_SWARM_METRICS_PORT": str(port)}
    if store_redacted:
        env["AGENTIHOOKS_SWARM_STORE_REDACTED"] = "true"
    process = scene.start(env=env)
    status = await refused_and_counted(scene, names=["leak"], process=process)
    assert_hidden("the Swarm's status", json.dumps(status))
    assert "<redacted>" in status["refusals"]["top"][0]["text"]
    events = await scene.events_once("leak", reasons={"StartupRefused"}, process=process)
    assert_hidden("the Events", json.dumps(events))
    [refused] = [message for _, reason, message in events if reason == "StartupRefused"]
    assert "postgres://<redacted>@db.internal" in refused and "Bearer <redacted>" in refused
    metrics = await asyncio.to_thread(scrape, port)
    assert "agentihooks_swarm_refusal_fingerprint_count{" in metrics and 'text="' not in metrics
    assert_hidden("/metrics", metrics)
    for view in VIEWS:
        for full in ([], ["--full"]):
            shown = await scene.python(
                "-m", "agentihooks_swarm", "records", view, SLUG, "leak", *full, check=False
            )
            assert_hidden(f"records {view} {full}", shown.stdout + shown.stderr)
    startup = await scene.python("-m", "agentihooks_swarm", "records", "startup", SLUG, "leak")
    assert "<redacted>" in startup.stdout
    top = await scene.python("-m", "agentihooks_swarm", "records", "top", SLUG)
    assert_hidden("records top", top.stdout + top.stderr)
    stored = await scene.stored(slug=SLUG, name="attempt-startup-diagnostics", execution="leak")
    log = stored["startup"]["containers"][0]["log"]
    if store_redacted:
        assert_hidden("Redis", json.dumps(stored))
        assert stored["startup"]["redacted"] is True and "<redacted>" in log
    else:  # The spec's log is what the worker printed: the views above hid what Redis holds.
        assert all(secret in log for secret in SECRETS) and "redacted" not in stored["startup"]
    process.stop()
    assert_hidden("the operator's log", process.log())


#: Twelve Pods refused by one cause, their last lines differing only in ids: short hex runs, mixed
#: tokens, numbers and addresses.
IDS: Final = [
    ("3fa9c2d1-7b2e", "10.0.3.7:6379", "x7k2p", 3),
    ("beefcafe-1234", "10.0.12.70:6380", "b9zzq", 12),
    ("12345678-9abc", "192.168.1.1:7000", "q2w4e", 1),
    ("0a1b2c3d-dead", "172.16.0.254:6379", "m4n5b", 100),
    ("7f3e-9b0d", "10.1.1.1:1", "ab12c", 7),
    ("c0ffee12", "10.9.8.7:65535", "zz9zz", 0),
    ("a1b2", "127.0.0.1:6379", "pp3qq", 42),
    ("deadbee5-f00d", "10.0.0.2:6379", "r5t6y", 9),
    ("0f3e", "10.200.3.4:2000", "k8s4u", 55),
    ("abc123def456", "10.0.3.8:6379", "w1x2z", 2),
    ("9999-aaaa", "10.0.3.9:6379", "l0l0l", 31337),
    ("e5e5e5e5-5e5e", "10.0.3.10:6379", "v7b8n", 8),
]


async def test_twelve_refusals_that_differ_only_in_ids_are_one_fingerprint(scene: Scene) -> None:
    names = [f"id-{i:02d}" for i in range(len(IDS))]
    for name, (request, address, suffix, tries) in zip(names, IDS, strict=True):
        line = (
            f"worker startup refused: upstream {address} answered 503 after {tries} tries "
            f"(request {request}, pod swarm-worker-{suffix})\n"
        )
        await plant(scene, name=name, log=line.encode(), share=name)
    process = scene.start()
    status = await refused_and_counted(scene, names=names, process=process)
    [top] = status["refusals"]["top"]
    assert top["count"] == 12, top
    assert top["text"] == (
        "<time> worker startup refused: upstream <id>:<id> answered <id> after <id> tries "
        "(request <id>, pod <id>)"
    )
    table = await scene.python("-m", "agentihooks_swarm", "records", "top", SLUG)
    header, *rows = table.stdout.splitlines()
    assert header.split()[:2] == ["COUNT", "FINGERPRINT"]
    assert [row.split()[:2] for row in rows] == [["12", top["fingerprint"]]]
    stored = await asyncio.gather(
        *(scene.stored(slug=SLUG, name="attempt-startup-diagnostics", execution=n) for n in names)
    )
    assert {record["startup"]["fingerprint"] for record in stored} == {top["fingerprint"]}
