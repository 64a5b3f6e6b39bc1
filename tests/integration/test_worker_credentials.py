"""A swarm's worker credential on the real API server and the real redis-server: the Secret the
operator owns (by the Swarm's UID) and every worker Pod mounts, the Redis user it names made again
after Redis restarts, its rotation's overlap, and a Redis that refuses users (issue 28, item 4)."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions
from kubernetes_asyncio import client

from agentihooks_swarm import app as app_, metrics as metrics_, settings as settings_, store as store_
from agentihooks_swarm.kubernetes import clients, labels, secrets
from agentihooks_swarm.storage import acl, operations
from agentihooks_swarm.swarm import credentials, worker_secret
from agentihooks_swarm.worker import reports
from tests.support import app_tasks, builders, watching
from tests.support.clocks import Clock
from tests.support.cluster import ControlPlane
from tests.support.fixtures_cluster import api_client
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.usefixtures("acl_users_dropped")

DAY = 86_400.0
INTERVAL = 300.0


async def secret_of(api: client.ApiClient, *, namespace: str, swarm: str) -> dict[str, Any] | None:
    """The Swarm's credential Secret as the API server has it (None: none), its data decoded."""
    try:
        found = await client.CoreV1Api(api).read_namespaced_secret(
            labels.worker_credential_name(swarm), namespace
        )
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    raw: dict[str, Any] = api.sanitize_for_serialization(found)
    raw["decoded"] = {k: base64.b64decode(v).decode() for k, v in (raw.get("data") or {}).items()}
    return raw


def reporter(secret: dict[str, Any], folder: Path) -> store_.Store:
    """A worker's store, from the Secret's keys as the kubelet mounts them."""
    folder.mkdir(parents=True, exist_ok=True)
    for key, value in secret["decoded"].items():
        (folder / key).write_text(value)
    return reports.connect({labels.CREDENTIAL_ENV: str(folder)})


async def report(worker: store_.Store, *, slug: str, execution: str) -> bool:
    """Whether the worker's heartbeat and outcome are taken (False: its password is refused)."""
    try:
        reports.heartbeat(
            store=worker, slug=slug, execution=execution, generation=1, transcript=2, archived=1
        )
        return reports.outcome(store=worker, slug=slug, execution=execution, generation=1, success=True)
    except redis.exceptions.AuthenticationError:
        return False


async def create_swarm(api: client.ApiClient, *, namespace: str, name: str) -> dict[str, Any]:
    await watching.create(api, builders.swarm(name=name, namespace=namespace))
    found: dict[str, Any] = await client.CustomObjectsApi(api).get_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, "swarms", name
    )
    return found


@contextlib.asynccontextmanager
async def running(
    kubeconfig: Path, store: operations.AsyncStore, url: str, namespace: str
) -> AsyncIterator[app_.App]:
    """The operator's tasks (all but kopf's), as ``run`` wires them; a pass only every hour, so a
    user made again after a restart is the new primary's doing."""
    settings = settings_.Settings(
        redis_url=url,
        namespace=namespace,
        cleanup_interval_seconds=0.5,
        lease_duration_seconds=6,
        api_timeout_seconds=3,
        worker_credentials_interval_seconds=3600,
    )
    async with app_tasks.running(
        kubeconfig=kubeconfig, store=store, settings=settings, identity="credentials-test"
    ) as app:
        yield app


async def test_a_worker_pod_mounts_its_swarms_credential_which_the_swarm_owns(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    swarm_crds: list[str],
    store: operations.AsyncStore,
    redis_server: RedisServer,
    redis_url: str,
    tmp_path: Path,
) -> None:
    async with running(control_plane.kubeconfig, store, redis_url, namespace) as app:
        swarm = await create_swarm(admin_api, namespace=namespace, name="creds")
        await watching.create(admin_api, builders.execution(name="e1", namespace=namespace, swarm="creds"))
        pod = await watching.eventually(
            lambda: _pod(admin_api, namespace=namespace, name="swarm-worker-e1-1"), what="the worker Pod"
        )
        secret = await secret_of(admin_api, namespace=namespace, swarm="creds")
        assert secret is not None

        # The Pod mounts it (optional, read-only) and says where.
        [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "worker-redis"]
        assert volume["secret"] == {
            "secretName": "swarm-worker-redis-creds",
            "optional": True,
            "defaultMode": 420,
        }
        [container] = pod["spec"]["containers"]
        assert {"name": "worker-redis", "mountPath": "/etc/agentihooks/redis", "readOnly": True} in container[
            "volumeMounts"
        ]
        assert {"name": "AGENTIHOOKS_SWARM_WORKER_REDIS", "value": "/etc/agentihooks/redis"} in container[
            "env"
        ]

        # The Secret: owned by the Swarm (its UID), what a worker reads, never the operator's own.
        metadata = secret["metadata"]
        assert metadata["ownerReferences"] == [
            {
                "apiVersion": "swarm.agentihooks.io/v1alpha1",
                "kind": "Swarm",
                "name": "creds",
                "uid": swarm["metadata"]["uid"],
                "controller": True,
            }
        ]
        assert metadata["labels"][labels.CREDENTIAL] == "creds"
        assert set(secret["decoded"]) == {"url", "username", "password", "prefix", "mode"}
        assert secret["decoded"]["url"] == redis_url
        assert secret["decoded"]["username"] == "agentihooks-swarm-worker-creds"
        worker = reporter(secret, tmp_path / "mounted")
        assert await report(worker, slug="creds", execution="e1")
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.redis.hget(store.key("creds", store_.STARTUP_DIAGNOSTICS), "e1")

        async def ready() -> bool:
            status = (await _swarm(admin_api, namespace=namespace, name="creds")).get("status") or {}
            found = [c for c in status.get("conditions") or [] if c["type"] == "WorkerCredential"]
            return bool(found) and (found[0]["status"], found[0]["reason"]) == ("True", "Ready")

        assert app.credentials is not None
        await app.credentials.refresh_all()
        await watching.eventually(ready, what="the Swarm's WorkerCredential condition")

        # Redis restarted without an aclfile has lost the user: the leader makes it again at
        # once (a pass is an hour away), from the Secret, with the same password.
        redis_server.restart()
        worker.redis.close()
        worker = reporter(secret, tmp_path / "mounted")
        await watching.eventually(
            lambda: report(worker, slug="creds", execution="e2"), what="the user made again", timeout=20
        )
        worker.redis.close()


async def _pod(api: client.ApiClient, *, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found = await client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    raw: dict[str, Any] = api.sanitize_for_serialization(found)
    return raw


async def _swarm(api: client.ApiClient, *, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = await client.CustomObjectsApi(api).get_namespaced_custom_object(
        "swarm.agentihooks.io", "v1alpha1", namespace, "swarms", name
    )
    return found


@contextlib.asynccontextmanager
async def kept(
    kubeconfig: Path, *, store: operations.AsyncStore, url: str, namespace: str, clock: Clock
) -> AsyncIterator[credentials.WorkerCredentials]:
    """The operator's worker credentials on the real API server and ``store``, at ``clock``'s time."""
    async with api_client(kubeconfig=kubeconfig) as api:
        cluster = clients.build(api=api, timeout=3.0)
        yield credentials.WorkerCredentials(
            secrets=secrets.SecretClient(transport=cluster.transport),
            swarms=cluster.swarms,
            events=cluster.events,
            users=acl.WorkerUsers(connection=store),
            metrics=metrics_.Metrics(),
            content=worker_secret.Content(address=worker_secret.Address(url=url), prefix=store.prefix),
            slugs=store.slugs,
            namespaces=(namespace,),
            holds=lambda: True,
            interval=INTERVAL,
            rotation_seconds=DAY,
            instance="credentials-test",
            clock=clock,
        )


async def test_rotation_keeps_the_previous_password_one_interval_then_drops_it(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    swarm_crds: list[str],
    store: operations.AsyncStore,
    redis_url: str,
    tmp_path: Path,
) -> None:
    swarm = await create_swarm(admin_api, namespace=namespace, name="rot")
    ref = worker_secret.SwarmRef.of(swarm)
    clock = Clock(now=1_000_000.0)
    async with kept(
        control_plane.kubeconfig, store=store, url=redis_url, namespace=namespace, clock=clock
    ) as made:
        assert (await made.make(ref)).reason == "Ready"
        first = await secret_of(admin_api, namespace=namespace, swarm="rot")
        assert first is not None
        old = reporter(first, tmp_path / "old")

        clock.now += DAY  # Due: the new password, and the old one still taken.
        await made.make(ref)
        second = await secret_of(admin_api, namespace=namespace, swarm="rot")
        assert second is not None and second["decoded"]["password"] != first["decoded"]["password"]
        annotations = second["metadata"]["annotations"]
        assert annotations[labels.PREVIOUS_DIGEST] == acl.digest(first["decoded"]["password"])
        new = reporter(second, tmp_path / "new")
        assert await report(old, slug="rot", execution="e1") and await report(new, slug="rot", execution="e2")

        clock.now += INTERVAL - 1  # Within the overlap: a pass keeps both.
        await made.make(ref)
        assert await report(old, slug="rot", execution="e3")

        clock.now += 1  # One interval after the rotation: the old one is dropped, everywhere.
        await made.make(ref)
        old.redis.close()  # A new connection, as the next worker command makes.
        assert not await report(old, slug="rot", execution="e4")
        assert await report(new, slug="rot", execution="e5")
        third = await secret_of(admin_api, namespace=namespace, swarm="rot")
        assert third is not None and labels.PREVIOUS_DIGEST not in third["metadata"]["annotations"]
        assert third["decoded"]["password"] == second["decoded"]["password"]
        assert [o["uid"] for o in third["metadata"]["ownerReferences"]] == [ref.uid]
    for client_ in (old, new):
        client_.redis.close()


async def test_a_redis_that_refuses_users_is_said_on_the_swarm_and_a_supplied_secret_is_used(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    swarm_crds: list[str],
    store: operations.AsyncStore,
    redis_url: str,
) -> None:
    # A managed Redis's operator user: everything but the admin commands (ACL among them).
    await store.redis.execute_command("ACL", "SETUSER", "limited", "on", ">limited", "~*", "+@all", "-@admin")
    limited = settings_.Settings(redis_url=redis_url.replace("redis://", "redis://limited:limited@"))
    swarm = await create_swarm(admin_api, namespace=namespace, name="managed")
    async with (
        operations.open_store(limited) as limited_store,
        kept(
            control_plane.kubeconfig,
            store=limited_store,
            url=redis_url,
            namespace=namespace,
            clock=Clock(now=0.0),
        ) as made,
    ):
        # No user, no Secret; the worker still launches (it mounts the name, optional).
        assert await made.ensure(swarm=swarm) == "swarm-worker-redis-managed"
        assert await secret_of(admin_api, namespace=namespace, swarm="managed") is None
        await made.refresh(await _swarm(admin_api, namespace=namespace, name="managed"))
        [condition] = [
            c
            for c in ((await _swarm(admin_api, namespace=namespace, name="managed"))["status"]["conditions"])
            if c["type"] == "WorkerCredential"
        ]
        assert (condition["status"], condition["reason"]) == ("False", "RedisRefusedUser")
        assert "annotated swarm.agentihooks.io/supplied=true" in condition["message"]
        events = await watching.events_for(admin_api, namespace=namespace, name="managed")
        assert [e for e in events if e[1] == "RedisRefusedUser"]
        sample = made.metrics.registry.get_sample_value(
            "agentihooks_swarm_worker_credentials_total", {"result": "redis_refused"}
        )
        assert sample == 2

        # The admin supplies one: it is mounted as it is, and never changed.
        data = {"url": redis_url, "username": "supplied-user", "password": "supplied-password"}
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(
                name="swarm-worker-redis-managed", annotations={labels.SUPPLIED: "true"}
            ),
            string_data=data,
        )
        await client.CoreV1Api(admin_api).create_namespaced_secret(namespace, body)
        before = await secret_of(admin_api, namespace=namespace, swarm="managed")
        await made.refresh(await _swarm(admin_api, namespace=namespace, name="managed"))
        after = await secret_of(admin_api, namespace=namespace, swarm="managed")
        assert before is not None and after is not None
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        status = (await _swarm(admin_api, namespace=namespace, name="managed"))["status"]
        [condition] = [c for c in status["conditions"] if c["type"] == "WorkerCredential"]
        assert (condition["status"], condition["reason"]) == ("True", "Supplied")
        assert swarm["metadata"]["uid"]
