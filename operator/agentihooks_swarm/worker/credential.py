"""The worker's Redis credential: where it reaches Redis, as whom, and the client that does.

The operator mounts each worker Pod's swarm credential (the Secret ``swarm-worker-redis-<swarm>``)
at ``/etc/agentihooks/redis`` and says so in ``AGENTIHOOKS_SWARM_WORKER_REDIS``; each of the
Secret's keys is a file there (docs/workers.md):

``url``
    ``redis://host:port/db`` (``rediss://`` for TLS; on a Redis Cluster any node).
``username``, ``password``
    The swarm's worker user: it may write only this swarm's heartbeats and outcomes.
``prefix``
    The operator's key prefix (``KEY_PREFIX``; ``agentihooks-swarm`` when absent).
``mode``
    ``standalone`` (when absent), ``sentinel`` or ``cluster``; with ``sentinel``, ``sentinels``
    (``host:port,…``) and ``sentinel-master`` name the primary.
``ca.crt``
    The CA bundle a ``rediss://`` server is verified with (when the operator has one).

``AGENTIHOOKS_SWARM_WORKER_REDIS_URL``, ``…_USERNAME`` and ``…_PASSWORD`` override the files (a
sidecar, or a test outside a Pod). The files are read on every :func:`load`: the kubelet updates a
mounted Secret in place, so a command run after a rotation authenticates with the new password.
With neither a username nor a password given, there is no credential and the worker connects as
it always did (:func:`agentihooks_swarm.store.connect`, ``AGENTIHOOKS_SWARM_REDIS_*``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pydantic
import redis
import redis.cluster
import redis.sentinel

from agentihooks_swarm import errors
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.storage import topology

#: The variables that override the mounted files, by the file they override.
OVERRIDES = {
    "url": "AGENTIHOOKS_SWARM_WORKER_REDIS_URL",
    "username": "AGENTIHOOKS_SWARM_WORKER_REDIS_USERNAME",
    "password": "AGENTIHOOKS_SWARM_WORKER_REDIS_PASSWORD",
}
#: Seconds to connect and to wait for each answer.
TIMEOUT_SECONDS = 5.0


class Credential(pydantic.BaseModel):
    """A worker's Redis credential, as its Secret's keys give it."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    url: str = ""
    username: str
    password: str = pydantic.Field(repr=False)
    prefix: str = pydantic.Field(default="agentihooks-swarm", min_length=1)
    mode: Literal["standalone", "sentinel", "cluster"] = "standalone"
    sentinels: str = ""
    sentinel_master: str = "mymaster"
    #: The path of the CA bundle (the mounted ``ca.crt``), if there is one.
    ca_file: str | None = None

    @pydantic.model_validator(mode="after")
    def _address(self) -> Credential:
        if self.mode == "sentinel" and not self.sentinels.strip():
            raise ValueError("mode sentinel needs 'sentinels' (host:port,…)")
        if self.mode != "sentinel" and not self.url:
            raise ValueError("no 'url' to reach Redis at")
        return self


def _process_environment() -> dict[str, str]:
    """The variables :func:`load` reads, from this process's environment."""
    found = {
        "AGENTIHOOKS_SWARM_WORKER_REDIS": os.environ.get("AGENTIHOOKS_SWARM_WORKER_REDIS"),
        "AGENTIHOOKS_SWARM_WORKER_REDIS_URL": os.environ.get("AGENTIHOOKS_SWARM_WORKER_REDIS_URL"),
        "AGENTIHOOKS_SWARM_WORKER_REDIS_USERNAME": os.environ.get("AGENTIHOOKS_SWARM_WORKER_REDIS_USERNAME"),
        "AGENTIHOOKS_SWARM_WORKER_REDIS_PASSWORD": os.environ.get("AGENTIHOOKS_SWARM_WORKER_REDIS_PASSWORD"),
    }
    return {name: value for name, value in found.items() if value is not None}


def load(variables: Mapping[str, str] | None = None) -> Credential | None:
    """The credential the environment and the mounted files give, or None when none is given.

    Raises :class:`errors.InvalidCredential` when one is given but cannot be used (a password
    without a username, no address).
    """
    env = _process_environment() if variables is None else variables
    folder = env.get("AGENTIHOOKS_SWARM_WORKER_REDIS", "")
    values: dict[str, Any] = _files(Path(folder)) if folder else {}
    given = {
        "url": env.get("AGENTIHOOKS_SWARM_WORKER_REDIS_URL"),
        "username": env.get("AGENTIHOOKS_SWARM_WORKER_REDIS_USERNAME"),
        "password": env.get("AGENTIHOOKS_SWARM_WORKER_REDIS_PASSWORD"),
    }
    values.update({name: value for name, value in given.items() if value})
    if not values.get("username") and not values.get("password"):
        return None
    where = f"{labels.CREDENTIAL_ENV}={folder}" if folder else ", ".join(OVERRIDES.values())
    if not values.get("username") or not values.get("password"):
        raise errors.InvalidCredential(
            f"The worker's Redis credential ({where}) needs both a username and a password"
        )
    try:
        return Credential.model_validate(values)
    except pydantic.ValidationError as e:
        problems = "; ".join(str(error["msg"]) for error in e.errors())
        raise errors.InvalidCredential(
            f"The worker's Redis credential ({where}) cannot be used: {problems}"
        ) from e


def _files(folder: Path) -> dict[str, Any]:
    """The Secret's keys as files (a missing folder or key is no value)."""
    found: dict[str, Any] = {}
    for key in ("url", "username", "password", "prefix", "mode", "sentinels", "sentinel-master"):
        path = folder / key
        if path.is_file():
            value = path.read_text().strip()
            if value:
                found[key.replace("-", "_")] = value
    if (folder / "ca.crt").is_file():
        found["ca_file"] = str(folder / "ca.crt")
    return found


def client(credential: Credential) -> topology.SyncClient:
    """A synchronous client that authenticates as the worker's user (nothing is sent until used)."""
    options: dict[str, Any] = {
        "decode_responses": True,
        "username": credential.username,
        "password": credential.password,
        "socket_timeout": TIMEOUT_SECONDS,
        "socket_connect_timeout": TIMEOUT_SECONDS,
    }
    if credential.ca_file is not None:
        options["ssl_ca_certs"] = credential.ca_file
    if credential.mode == "cluster":
        return redis.cluster.RedisCluster.from_url(credential.url, **options)
    if credential.mode == "sentinel":
        # The Sentinels are asked for the primary only; they are not the worker's to manage.
        sentinel_options: dict[str, Any] = {
            "socket_timeout": TIMEOUT_SECONDS,
            "socket_connect_timeout": TIMEOUT_SECONDS,
        }
        if credential.ca_file is not None:
            options["ssl"] = sentinel_options["ssl"] = True
            sentinel_options["ssl_ca_certs"] = credential.ca_file
        addresses = [_address(item) for item in credential.sentinels.split(",") if item.strip()]
        sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call,unused-ignore]
            addresses, sentinel_kwargs=sentinel_options
        )
        primary: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call,unused-ignore]
            credential.sentinel_master, **options
        )
        return primary
    return redis.Redis.from_url(credential.url, **options)


def _address(item: str) -> tuple[str, int]:
    """``host:port`` (a port-less entry means 26379), as the operator's own setting reads it."""
    item = item.strip()
    host, _, port = item.rpartition(":") if ":" in item else (item, "", "26379")
    if not port.isdigit():
        raise errors.InvalidCredential(f"The worker's Sentinel entry {item!r} is not host:port")
    return host.strip("[]"), int(port)
