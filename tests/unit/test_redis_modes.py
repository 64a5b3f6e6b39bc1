"""Redis mode settings and the client each mode builds (no server contacted), key slots."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.sentinel
from redis.crc import key_slot

from agentihooks_swarm import settings, store
from agentihooks_swarm.storage import keys, topology


def test_sentinel_mode_reads_its_variables() -> None:
    loaded = settings.Settings.from_env(
        {
            "AGENTIHOOKS_SWARM_REDIS_MODE": "sentinel",
            "AGENTIHOOKS_SWARM_REDIS_SENTINELS": "sentinel-0.redis:26379, sentinel-1.redis ,[::1]:26380",
            "AGENTIHOOKS_SWARM_REDIS_SENTINEL_MASTER": "evidence",
            "AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS": "1",
            "AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS_TIMEOUT_SECONDS": "0.5",
            "AGENTIHOOKS_SWARM_RETENTION_SECONDS": "86400",
        }
    )
    assert loaded.sentinel_addresses == [
        ("sentinel-0.redis", 26379),
        ("sentinel-1.redis", 26379),
        ("::1", 26380),
    ]
    assert (loaded.redis_sentinel_master, loaded.redis_min_replicas, loaded.retention_seconds) == (
        "evidence",
        1,
        86400,
    )


def test_defaults_are_standalone_no_wait_and_records_kept_for_good() -> None:
    loaded = settings.Settings.from_env({})
    assert (loaded.redis_mode, loaded.redis_min_replicas, loaded.retention_seconds) == ("standalone", 0, 0)
    assert settings.Settings.from_env({"AGENTIHOOKS_SWARM_RETENTION_SECONDS": "0"}).retention_seconds == 0


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"AGENTIHOOKS_SWARM_REDIS_MODE": "sentinel"},
            "REDIS_MODE=sentinel needs AGENTIHOOKS_SWARM_REDIS_SENTINELS",
        ),
        (
            {"AGENTIHOOKS_SWARM_REDIS_SENTINELS": "a:1"},
            "REDIS_SENTINELS is set but AGENTIHOOKS_SWARM_REDIS_MODE",
        ),
        (
            {"AGENTIHOOKS_SWARM_REDIS_MODE": "sentinel", "AGENTIHOOKS_SWARM_REDIS_SENTINELS": "a:b"},
            "entry 'a:b' is not host:port",
        ),
        ({"AGENTIHOOKS_SWARM_REDIS_MODE": "replicated"}, "AGENTIHOOKS_SWARM_REDIS_MODE='replicated'"),
        ({"AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS": "-1"}, "AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS='-1'"),
        ({"AGENTIHOOKS_SWARM_RETENTION_SECONDS": "-1"}, "AGENTIHOOKS_SWARM_RETENTION_SECONDS='-1'"),
        (
            {
                "AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS": "1",
                "AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS_TIMEOUT_SECONDS": "5",
            },
            "REDIS_MIN_REPLICAS_TIMEOUT_SECONDS must be below AGENTIHOOKS_SWARM_REDIS_TIMEOUT_SECONDS",
        ),
    ],
)
def test_bad_redis_settings_name_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(settings.InvalidSettings, match=message):
        settings.Settings.from_env(environ)


def test_each_mode_gets_redis_py_own_client() -> None:
    standalone = settings.Settings()
    sentinel = settings.Settings(redis_mode="sentinel", redis_sentinels="127.0.0.1:1")
    cluster = settings.Settings(redis_mode="cluster", redis_url="redis://127.0.0.1:1/0")
    assert type(topology.sync_client(standalone)) is redis.Redis
    assert type(topology.async_client(standalone)) is redis.asyncio.Redis
    people, operator = topology.sync_client(sentinel), topology.async_client(sentinel)
    assert isinstance(people, redis.Redis) and isinstance(operator, redis.asyncio.Redis)
    assert type(people.connection_pool).__name__ == "SentinelConnectionPool"
    assert type(operator.connection_pool).__name__ == "SentinelConnectionPool"
    assert isinstance(topology.async_client(cluster), redis.asyncio.cluster.RedisCluster)


def test_every_hash_of_a_swarm_and_its_retention_index_share_one_slot() -> None:
    names = [*keys.SWEPT, store.JOURNAL, store.RETENTION_INDEX]
    slots = {key_slot(store.key("agentihooks-swarm", "demo", name).encode()) for name in names}
    assert len(slots) == 1
    assert store.JOURNAL not in keys.SWEPT


def test_sentinel_tls_without_a_ca_file_uses_the_system_cas_and_checks_names() -> None:
    sentinel = settings.Settings(redis_mode="sentinel", redis_sentinels="127.0.0.1:1", redis_tls=True)
    assert topology.uses_tls(sentinel)
    client = topology.sync_client(sentinel)
    assert isinstance(client, redis.Redis)
    assert client.connection_pool.connection_class is redis.sentinel.SentinelManagedSSLConnection
    pool = client.connection_pool
    assert isinstance(pool, redis.sentinel.SentinelConnectionPool)
    [asked] = pool.sentinel_manager.sentinels
    kwargs = asked.connection_pool.connection_kwargs
    assert (kwargs["ssl_ca_certs"], kwargs["ssl_check_hostname"]) == (None, True)
    assert pool.connection_kwargs["ssl_check_hostname"] is True


@pytest.mark.parametrize(
    ("environ", "tls"),
    [
        ({}, False),
        ({"REDIS_URL": "rediss://redis.example:6380/0"}, True),
        ({"REDIS_URL": "redis://redis.example:6379/0", "REDIS_CA_FILE": "/ca.crt"}, False),
        ({"REDIS_MODE": "sentinel", "REDIS_SENTINELS": "s:26379", "REDIS_CA_FILE": "/ca.crt"}, True),
        ({"REDIS_MODE": "sentinel", "REDIS_SENTINELS": "s:26379"}, False),
    ],
)
def test_which_settings_mean_tls(environ: dict[str, str], tls: bool) -> None:
    chosen = settings.Settings.from_env({f"AGENTIHOOKS_SWARM_{k}": v for k, v in environ.items()})
    assert topology.uses_tls(chosen) is tls
    client = topology.sync_client(chosen)
    assert isinstance(client, redis.Redis)
    kwargs = client.connection_pool.connection_kwargs
    assert ("ssl_check_hostname" in kwargs) is tls
