"""Which Redis holds the evidence: one server, a Sentinel-managed primary, or a Redis Cluster.

Each mode is redis-py's own client for it, so failover (Sentinel), slot moves and redirections
(Cluster) are handled where redis-py's users expect them:

* ``standalone`` — ``redis.Redis.from_url(REDIS_URL)`` (what the operator always did);
* ``sentinel`` — ``Sentinel(REDIS_SENTINELS).master_for(REDIS_SENTINEL_MASTER)``: every new
  connection asks the Sentinels for the current primary. ``REDIS_URL`` is not used;
  ``REDIS_PASSWORD`` authenticates to the primary, ``REDIS_SENTINEL_PASSWORD`` to the Sentinels,
  and ``REDIS_TLS`` (or ``REDIS_CA_FILE``) turns TLS on for both;
* ``cluster`` — ``RedisCluster.from_url(REDIS_URL)`` with REDIS_URL naming any node.

Over TLS the server's certificate must name the host connected to (``ssl_check_hostname``),
said here rather than left to redis-py's default, which was off before redis-py 6: without it a
``rediss://`` URL without a CA file would accept any publicly trusted certificate for any name.
``REDIS_TLS_CHECK_HOSTNAME=false`` is the opt-out for a private CA without proper names.

The synchronous client serves people (``connect()`` and the read commands); the asyncio client
serves the operator. Both answer ``hget``/``hset``/``eval``/``pipeline`` the same way.
"""

from __future__ import annotations

import logging
from typing import Any, TypeAlias

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel

from agentihooks_swarm import settings as settings_

SyncClient: TypeAlias = "redis.Redis | redis.cluster.RedisCluster"
AsyncClient: TypeAlias = "redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster"

logger = logging.getLogger(__name__)


def uses_tls(settings: settings_.Settings) -> bool:
    """Whether the controller talks TLS to Redis: rediss:// (standalone, cluster), or in sentinel
    mode REDIS_TLS or a CA file (no URL says rediss:// there)."""
    if settings.redis_mode == "sentinel":
        return settings.redis_tls or settings.redis_ca_file is not None
    return settings.redis_url.lower().startswith("rediss://")


def _tls(settings: settings_.Settings) -> dict[str, Any]:
    """The TLS options of every connection, or none when TLS is off (a plain connection takes no
    ssl_* argument)."""
    if not uses_tls(settings):
        return {}
    options: dict[str, Any] = {"ssl_check_hostname": settings.redis_tls_check_hostname}
    if settings.redis_ca_file is not None:
        options["ssl_ca_certs"] = settings.redis_ca_file
    if settings.redis_mode == "sentinel":
        options["ssl"] = True  # No URL to say rediss:// in this mode.
    if not settings.redis_tls_check_hostname:
        logger.warning(
            "Redis TLS: the server's host name is not checked (REDIS_TLS_CHECK_HOSTNAME=false): any "
            "certificate the trusted CAs signed is accepted for any Redis host."
        )
    return options


def _options(settings: settings_.Settings, *, cluster: bool = False) -> dict[str, Any]:
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": settings.redis_timeout_seconds,
        "socket_connect_timeout": settings.redis_timeout_seconds,
    }
    if not cluster:  # The cluster clients check their nodes themselves.
        options["health_check_interval"] = 30
    if settings.redis_username is not None:
        options["username"] = settings.redis_username
    if settings.redis_password is not None:
        options["password"] = settings.redis_password
    options.update(_tls(settings))
    return options


def _sentinel_options(settings: settings_.Settings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "socket_timeout": settings.redis_timeout_seconds,
        "socket_connect_timeout": settings.redis_timeout_seconds,
    }
    if settings.redis_sentinel_password is not None:
        options["password"] = settings.redis_sentinel_password
    options.update(_tls(settings))
    return options


def sync_client(settings: settings_.Settings) -> SyncClient:
    """The synchronous client of the configured Redis (nothing is sent until the first command)."""
    if settings.redis_mode == "cluster":
        return redis.cluster.RedisCluster.from_url(settings.redis_url, **_options(settings, cluster=True))
    if settings.redis_mode == "sentinel":
        sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call,unused-ignore]
            settings.sentinel_addresses, sentinel_kwargs=_sentinel_options(settings)
        )
        primary: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call,unused-ignore]
            settings.redis_sentinel_master, **_options(settings)
        )
        return primary
    return redis.Redis.from_url(settings.redis_url, **_options(settings))


def async_client(settings: settings_.Settings) -> AsyncClient:
    """The asyncio client of the configured Redis (connects on the first command)."""
    if settings.redis_mode == "cluster":
        return redis.asyncio.cluster.RedisCluster.from_url(
            settings.redis_url, **_options(settings, cluster=True)
        )
    if settings.redis_mode == "sentinel":
        sentinel = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call,unused-ignore]
            settings.sentinel_addresses, sentinel_kwargs=_sentinel_options(settings)
        )
        primary: redis.asyncio.Redis = sentinel.master_for(
            settings.redis_sentinel_master, **_options(settings)
        )
        return primary
    return redis.asyncio.Redis.from_url(settings.redis_url, **_options(settings))
