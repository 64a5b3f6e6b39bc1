"""The records reader's Redis user on a real redis-server: through the ``records`` views it reads
every kind of record the operator keeps, and it can write nothing, run no server command and read
no key outside the operator's prefix."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.exceptions

from agentihooks_swarm import metrics, records, settings, store as store_
from agentihooks_swarm.kubernetes import clients, secrets
from agentihooks_swarm.storage import acl, operations
from agentihooks_swarm.swarm import credentials, worker_secret
from tests.support import commands
from tests.support.cluster import ControlPlane
from tests.support.fixtures_cluster import api_client
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("acl_users_dropped")]

PASSWORD = "reader-password-1"
SLUG = "readable"


def document(view: str) -> dict[str, Any]:
    """A record as the view's hash holds it, marked with its view."""
    pods = [{"name": f"swarm-worker-{view}", "startup": {"phase": "Failed"}}]
    documents: dict[str, dict[str, Any]] = {
        "startup": {"pod": "swarm-worker-e1", "startup": {"phase": "Failed", "containers": []}},
        "retained": {"execution": "e1", "removed": {"pods": pods}},
        "journal": {"execution": "e1", "pinned": {"pods": pods}},
        "hand": {"generation": 1, "handed": False, "pod": "swarm-worker-e1"},
        "final": {"execution": "e1", "generation": 1, "state": "refused", "outcome": "x"},
    }
    return documents[view]


async def planted(store: operations.AsyncStore) -> None:
    """One record of each view's kind for execution e1, a fingerprint, and a key not the operator's."""
    hashes = {
        "startup": store_.STARTUP_DIAGNOSTICS,
        "retained": store_.RETAINED,
        "journal": store_.JOURNAL,
        "hand": store_.HANDS,
        "final": store_.FINALS,
    }
    for view, name in hashes.items():
        await store.redis.hset(store.key(SLUG, name), "e1", json.dumps(document(view)))
    summary = records.FingerprintSummary.model_validate(
        {
            "fingerprint": "f1",
            "text": "worker startup refused",
            "class": "exit_code",
            "count": 3,
            "first_seen": "2026-12-04T00:00:00Z",
            "last_seen": "2026-12-04T00:01:00Z",
            "example": {
                "execution": "e1",
                "pod": "swarm-worker-e1",
                "uid": "u1",
                "at": "2026-12-04T00:01:00Z",
            },
        }
    )
    await store.redis.hset(store.key(SLUG, store_.FINGERPRINTS), "f1", records.dump(summary))
    await store.redis.hset("another-app:{readable}:secrets", "e1", "not the operator's")


async def test_the_reader_reads_every_record_through_the_records_views(
    store: operations.AsyncStore, redis_url: str
) -> None:
    await acl.WorkerUsers(connection=store).ensure_reader(digests=[acl.digest(PASSWORD)])
    await planted(store)
    reader = {"redis_url": redis_url, "username": acl.reader_username(prefix=store.prefix)}

    for view in ("startup", "retained", "journal", "hand", "final"):
        shown = commands.records_view(view, SLUG, "e1", "--full", password=PASSWORD, **reader)
        assert shown.returncode == 0, shown
        assert json.loads(shown.stdout) == document(view)
    focused = commands.records_view("retained", SLUG, "e1", password=PASSWORD, **reader)
    assert json.loads(focused.stdout) == [{"name": "swarm-worker-retained", "startup": {"phase": "Failed"}}]
    top = commands.records_view("top", SLUG, password=PASSWORD, **reader)
    assert top.returncode == 0, top
    assert top.stdout.splitlines()[1].split()[:3] == ["3", "f1", "exit_code"]
    missing = commands.records_view("startup", SLUG, "e2", password=PASSWORD, **reader)
    assert missing.returncode == 1 and "No launch removal's capture" in missing.stderr
    # A wrong password is no reader.
    wrong = commands.records_view("startup", SLUG, "e1", password="guess", **reader)
    assert wrong.returncode == 2 and "AuthenticationError" in wrong.stderr


async def test_the_reader_writes_nothing_and_runs_no_server_command(
    store: operations.AsyncStore, redis_url: str
) -> None:
    await acl.WorkerUsers(connection=store).ensure_reader(digests=[acl.digest(PASSWORD)])
    await planted(store)
    username = acl.reader_username(prefix=store.prefix)
    reader = store_.connect(
        settings.Settings(redis_url=redis_url, redis_username=username, redis_password=PASSWORD)
    )
    # The spec's read command, as the reader.
    assert json.loads(str(reader.redis.hget(reader.key(SLUG, store_.FINALS), "e1"))) == document("final")
    own = reader.key(SLUG, store_.FINALS)
    refused: list[Callable[[], object]] = [
        lambda: reader.redis.hset(own, "e2", "{}"),
        lambda: reader.redis.hdel(own, "e1"),
        lambda: reader.redis.delete(own),
        lambda: reader.redis.eval("return redis.call('HGET', KEYS[1], 'e1')", 1, own),
        lambda: reader.redis.hget("another-app:{readable}:secrets", "e1"),
        lambda: reader.redis.flushall(),
        lambda: reader.redis.flushdb(),
        lambda: reader.redis.config_get("*"),
        lambda: reader.redis.keys("*"),
        lambda: reader.redis.scan(0),
        lambda: reader.redis.acl_list(),
        lambda: reader.redis.acl_setuser(username, commands=["+@all"]),
    ]
    for attempt in refused:
        with pytest.raises(redis.exceptions.ResponseError, match=r"no permissions|can.t run"):
            attempt()
    # The commands that write refuse too, and change nothing.
    for args in (("forget", SLUG, "e1", "--requested-by", "reader"), ("release", SLUG, "--namespace", "x")):
        written = commands.records_view(*args, redis_url=redis_url, username=username, password=PASSWORD)
        assert written.returncode != 0, written
    assert await store.redis.hget(own, "e1") is not None
    assert await store.redis.hget("another-app:{readable}:secrets", "e1") == "not the operator's"
    described = await store.redis.execute_command("ACL", "GETUSER", username)
    assert isinstance(described, dict) and described["passwords"] == [acl.digest(PASSWORD)]
    reader.redis.close()


async def reader_exists(store: operations.AsyncStore) -> bool:
    return acl.reader_username(prefix=store.prefix) in await store.redis.execute_command("ACL", "USERS")


async def until_reader(store: operations.AsyncStore, *, seconds: float) -> bool:
    for _ in range(int(seconds * 10)):
        if await reader_exists(store):
            return True
        await asyncio.sleep(0.1)
    return False


@contextlib.asynccontextmanager
async def passes(
    kubeconfig: Path, *, namespace: str, store: operations.AsyncStore, leading: asyncio.Event
) -> AsyncIterator[None]:
    """The leader's credential passes running (``leading`` says whether this replica leads)."""
    async with api_client(kubeconfig=kubeconfig) as api:
        cluster = clients.build(api=api, timeout=3.0)
        made = credentials.WorkerCredentials(
            secrets=secrets.SecretClient(transport=cluster.transport),
            swarms=cluster.swarms,
            events=cluster.events,
            users=acl.WorkerUsers(connection=store),
            metrics=metrics.Metrics(),
            content=worker_secret.Content(
                address=worker_secret.Address(url="redis://r:6379/0"), prefix=store.prefix
            ),
            slugs=store.slugs,
            namespaces=(namespace,),
            holds=leading.is_set,
            interval=300.0,
            rotation_seconds=86_400.0,
            instance="reader-test",
            reader_digests=(acl.digest(PASSWORD),),
            reader_retry_seconds=1.0,
        )
        task = asyncio.create_task(made.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_a_replica_makes_the_reader_user_as_soon_as_it_leads(
    control_plane: ControlPlane, namespace: str, swarm_crds: list[str], store: operations.AsyncStore
) -> None:
    """Not an interval (five minutes by default) after: the reader has no user until then."""
    leading = asyncio.Event()
    async with passes(control_plane.kubeconfig, namespace=namespace, store=store, leading=leading):
        await asyncio.sleep(1.5)
        assert not await reader_exists(store)  # A follower makes no user.
        leading.set()
        assert await until_reader(store, seconds=5)


async def test_the_reader_user_is_made_soon_after_redis_comes_up(
    control_plane: ControlPlane,
    namespace: str,
    swarm_crds: list[str],
    store: operations.AsyncStore,
    redis_server: RedisServer,
) -> None:
    """A fresh install: the controller leads before its Redis answers."""
    leading = asyncio.Event()
    leading.set()
    redis_server.stop()
    async with passes(control_plane.kubeconfig, namespace=namespace, store=store, leading=leading):
        await asyncio.sleep(1.5)  # The first pass failed: no Redis.
        redis_server.start()
        assert await until_reader(store, seconds=8)
