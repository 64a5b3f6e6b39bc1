"""A swarm's worker Redis user on a real redis-server: it reports its own swarm's heartbeat and
outcome through the worker's own commands, and can do nothing else (issue 28, item 4)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
import redis.exceptions

from agentihooks_swarm import errors, records, settings, store as store_
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.storage import acl, operations
from agentihooks_swarm.worker import credential, reports
from tests.support.redis_cluster import ClusterTopology

pytestmark = pytest.mark.usefixtures("acl_users_dropped")

PASSWORD = "worker-password-1"


def username_of(client: store_.Store) -> object:
    assert isinstance(client.redis, redis.Redis)
    return client.redis.connection_pool.connection_kwargs.get("username")


def mounted(folder: Path, *, url: str, slug: str, password: str = PASSWORD) -> dict[str, str]:
    """The credential's files as the operator's Secret mounts them, and the variable that says where."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "url": url,
        "username": acl.username(prefix="agentihooks-swarm", slug=slug),
        "password": password,
    }
    for key, value in {**files, "prefix": "agentihooks-swarm", "mode": "standalone"}.items():
        (folder / key).write_text(value + "\n")
    return {labels.CREDENTIAL_ENV: str(folder)}


async def test_the_worker_user_reports_its_own_swarm_and_can_do_nothing_else(
    store: operations.AsyncStore, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await acl.WorkerUsers(connection=store).ensure(slug="alpha", digests=[acl.digest(PASSWORD)])
    capture = json.dumps({"pod": "swarm-worker-e1-1", "startup": {"phase": "Failed"}})
    await store.redis.hset(store.key("alpha", store_.STARTUP_DIAGNOSTICS), "e1", capture)
    environ = mounted(tmp_path / "redis", url=redis_url, slug="alpha")
    worker = reports.connect(environ)
    assert username_of(worker) == "agentihooks-swarm-worker-alpha"

    # What it is for, through the worker's functions and its command line.
    beat = reports.heartbeat(
        store=worker, slug="alpha", execution="e1", generation=1, transcript=10, archived=4
    )
    assert (beat.transcript, beat.archived) == (10, 4)
    assert reports.outcome(store=worker, slug="alpha", execution="e1", generation=1, success=True) is True
    for name, value in {
        **environ,
        "AGENTIHOOKS_SWARM_SLUG": "alpha",
        "AGENTIHOOKS_SWARM_EXECUTION": "e2",
    }.items():
        monkeypatch.setenv(name, value)
    assert reports.main(["heartbeat", "--transcript", "8", "--archived", "8"]) == 0
    assert reports.main(["outcome", "--failure", "--summary", "no"]) == 0
    heartbeats = await store.redis.hgetall(store.key("alpha", store_.HEARTBEATS))
    outcomes = await store.redis.hgetall(store.key("alpha", store_.OUTCOMES))
    assert set(heartbeats) == {"e1", "e2"} and set(outcomes) == {"e1", "e2"}
    assert records.load(records.Outcome, outcomes["e2"]).success is False

    # Nothing else: no capture read, no other swarm's keys, no server commands.
    refused: list[Callable[[], object]] = [
        lambda: worker.redis.hget(worker.key("alpha", store_.STARTUP_DIAGNOSTICS), "e1"),
        lambda: worker.redis.hget(worker.key("alpha", store_.OUTCOMES), "e1"),
        lambda: worker.redis.hset(worker.key("alpha", store_.FINALS), "e1", "{}"),
        lambda: reports.heartbeat(
            store=worker, slug="beta", execution="e1", generation=1, transcript=1, archived=1
        ),
        lambda: reports.outcome(store=worker, slug="beta", execution="e1", generation=1, success=True),
        lambda: worker.redis.eval("return redis.call('HGET', KEYS[1], 'e1')", 1, worker.key("alpha", "x")),
        lambda: worker.redis.eval(
            "return redis.call('DEL', KEYS[1])", 1, worker.key("alpha", store_.HEARTBEATS)
        ),
        lambda: worker.redis.flushall(),
        lambda: worker.redis.config_get("*"),
        lambda: worker.redis.config_set("appendonly", "no"),
        lambda: worker.redis.keys("*"),
        lambda: worker.redis.acl_list(),
    ]
    for attempt in refused:
        with pytest.raises(redis.exceptions.ResponseError, match=r"no permissions|can.t run"):
            attempt()
    monkeypatch.setenv("AGENTIHOOKS_SWARM_SLUG", "beta")
    assert reports.main(["outcome", "--success"]) == 1
    assert await store.redis.hget(store.key("alpha", store_.STARTUP_DIAGNOSTICS), "e1") == capture
    assert (
        await store.redis.exists(store.key("beta", store_.OUTCOMES), store.key("beta", store_.HEARTBEATS))
        == 0
    )
    worker.redis.close()


async def test_without_a_credential_the_worker_connects_as_before(
    store: operations.AsyncStore, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTIHOOKS_SWARM_REDIS_URL", redis_url)
    assert credential.load({labels.CREDENTIAL_ENV: "/nonexistent"}) is None
    worker = reports.connect({})
    assert username_of(worker) is None
    assert reports.outcome(store=worker, slug="gamma", execution="e1", generation=1, success=True) is True
    assert await store.redis.hexists(store.key("gamma", store_.OUTCOMES), "e1")
    worker.redis.close()


async def test_a_wrong_password_is_refused_and_the_user_is_stated_whole_each_time(
    store: operations.AsyncStore, redis_url: str, tmp_path: Path
) -> None:
    users = acl.WorkerUsers(connection=store)
    await users.ensure(slug="delta", digests=[acl.digest("old"), acl.digest("new")])
    await users.ensure(slug="delta", digests=[acl.digest("new")])  # Idempotent, and whole: "old" is gone.
    old = reports.connect(mounted(tmp_path / "old", url=redis_url, slug="delta", password="old"))
    with pytest.raises(redis.exceptions.AuthenticationError):
        reports.outcome(store=old, slug="delta", execution="e1", generation=1, success=True)
    new = reports.connect(mounted(tmp_path / "new", url=redis_url, slug="delta", password="new"))
    assert reports.outcome(store=new, slug="delta", execution="e1", generation=1, success=True) is True
    described = await store.redis.execute_command(
        "ACL", "GETUSER", acl.username(prefix=store.prefix, slug="delta")
    )
    assert isinstance(described, dict) and described["passwords"] == [acl.digest("new")]
    await users.drop(slug="delta")
    assert acl.username(prefix=store.prefix, slug="delta") not in await store.redis.execute_command(
        "ACL", "USERS"
    )
    for client in (old, new):
        client.redis.close()


async def test_a_redis_that_refuses_acl_setuser_says_so(store: operations.AsyncStore, redis_url: str) -> None:
    # A managed Redis's operator user: everything but the admin commands (ACL among them).
    await store.redis.execute_command("ACL", "SETUSER", "limited", "on", ">limited", "~*", "+@all", "-@admin")
    limited = redis_url.replace("redis://", "redis://limited:limited@")
    async with operations.open_store(settings.Settings(redis_url=limited)) as limited_store:
        with pytest.raises(errors.AclRefused, match="no permissions"):
            await acl.WorkerUsers(connection=limited_store).ensure(slug="eps", digests=[acl.digest("x")])


async def test_on_a_redis_cluster_every_node_has_the_user_and_the_worker_follows_the_slot_map(
    tmp_path: Path,
) -> None:
    with ClusterTopology() as topology:
        async with operations.open_store(topology.settings()) as cluster_store:
            await acl.WorkerUsers(connection=cluster_store).ensure(slug="clu", digests=[acl.digest(PASSWORD)])
        # Replicas too: a failover promotes one, and it must know the user at once.
        for server in topology.servers:
            node = redis.Redis.from_url(server.url, decode_responses=True)
            assert "agentihooks-swarm-worker-clu" in node.acl_users(), server.port
            node.close()
        environ = mounted(tmp_path / "redis", url=topology.url, slug="clu")
        (tmp_path / "redis" / "mode").write_text("cluster\n")
        worker = reports.connect(environ)
        assert reports.outcome(store=worker, slug="clu", execution="e1", generation=1, success=True) is True
        beat = reports.heartbeat(
            store=worker, slug="clu", execution="e1", generation=1, transcript=5, archived=5
        )
        assert beat.archived == 5
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.redis.hget(worker.key("clu", store_.STARTUP_DIAGNOSTICS), "e1")
        with pytest.raises(redis.exceptions.NoPermissionError):
            reports.outcome(store=worker, slug="other", execution="e1", generation=1, success=True)
        worker.redis.close()
