"""A swarm's worker credential Secret, and what a pass does with it: pure (no I/O).

The Secret ``swarm-worker-redis-<swarm>`` holds what a worker reads
(:mod:`agentihooks_swarm.worker.credential`); :func:`plan` decides, from the Secret alone and the
time, whether its password is rotated, which passwords Redis accepts, and when a replaced one is
forgotten; the verdicts are the Swarm's ``WorkerCredential`` condition. The I/O is
:mod:`.credentials`.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

from agentihooks_swarm import errors, resources, settings as settings_
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import status as status_
from agentihooks_swarm.storage import acl

#: The Swarm's condition that says how its workers reach Redis.
CONDITION: Final = "WorkerCredential"
#: Query parameters of a Redis URL that carry a credential: never given to workers.
_SECRET_QUERY: Final = frozenset({"password", "username"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Address:
    """Where workers reach Redis (the Secret's ``url``, ``mode``, ``sentinels``, ``sentinel-master``)."""

    url: str
    mode: str = "standalone"
    sentinels: str = ""
    master: str = ""


def without_credentials(url: str) -> str:
    """``url`` without its user and password (in its authority or its query)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    query = urllib.parse.urlencode(
        [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k.lower() not in _SECRET_QUERY]
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def address(settings: settings_.Settings) -> Address:
    """Where the operator's settings say workers reach Redis (``WORKER_REDIS_URL``, else its own)."""
    if settings.worker_redis_url:
        mode = "cluster" if settings.redis_mode == "cluster" else "standalone"
        return Address(url=without_credentials(settings.worker_redis_url), mode=mode)
    if settings.redis_mode == "sentinel":
        return Address(
            url="", mode="sentinel", sentinels=settings.redis_sentinels, master=settings.redis_sentinel_master
        )
    return Address(url=without_credentials(settings.redis_url), mode=settings.redis_mode)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SwarmRef:
    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, swarm: Mapping[str, Any]) -> SwarmRef:
        metadata = swarm.get("metadata") or {}
        return cls(
            namespace=str(metadata.get("namespace") or ""),
            name=str(metadata.get("name") or ""),
            uid=str(metadata.get("uid") or ""),
        )

    @property
    def secret(self) -> str:
        return labels.worker_credential_name(self.name)

    def involved(self) -> dict[str, str]:
        return {
            "apiVersion": f"{resources.GROUP}/{resources.VERSION}",
            "kind": "Swarm",
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
        }


def _encode(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def decoded(secret: Mapping[str, Any], key: str) -> str:
    """A Secret's ``data[key]`` as text ('' when absent or not base64)."""
    raw = (secret.get("data") or {}).get(key)
    if not isinstance(raw, str):
        return ""
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""


def timestamp(at: float) -> str:
    return (
        datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def _parse_time(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Content:
    """What an operator-made Secret holds besides the password: the same for every swarm."""

    address: Address
    prefix: str
    #: The CA bundle's text, when the operator verifies a rediss:// server with one.
    ca: str | None = None

    def data(self, *, username: str, password: str) -> dict[str, str]:
        values = {
            "url": self.address.url,
            "username": username,
            "password": password,
            "prefix": self.prefix,
            "mode": self.address.mode,
        }
        if self.address.mode == "sentinel":
            values["sentinels"] = self.address.sentinels
            values["sentinel-master"] = self.address.master
        if self.ca is not None:
            values["ca.crt"] = self.ca
        return {k: _encode(v) for k, v in values.items() if v}


def owner_reference(swarm: SwarmRef) -> dict[str, Any]:
    # No blockOwnerDeletion: that would need update on swarms/finalizers, and nothing waits for it.
    return {
        "apiVersion": f"{resources.GROUP}/{resources.VERSION}",
        "kind": "Swarm",
        "name": swarm.name,
        "uid": swarm.uid,
        "controller": True,
    }


def secret_body(*, swarm: SwarmRef, data: dict[str, str], at: float) -> dict[str, Any]:
    """A new credential Secret, owned by its Swarm."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": swarm.secret,
            "namespace": swarm.namespace,
            "labels": {labels.CREDENTIAL: swarm.name, "app.kubernetes.io/managed-by": "agentihooks-swarm"},
            "annotations": {labels.ROTATED_AT: timestamp(at)},
            "ownerReferences": [owner_reference(swarm)],
        },
        "data": data,
    }


def kind_of(secret: Mapping[str, Any]) -> str:
    """``supplied`` (an admin's: mounted, never changed), ``ours`` (the operator made it) or ``foreign``."""
    metadata = secret.get("metadata") or {}
    if str((metadata.get("annotations") or {}).get(labels.SUPPLIED, "")).lower() == "true":
        return "supplied"
    if labels.CREDENTIAL in (metadata.get("labels") or {}):
        return "ours"
    return "foreign"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """What one pass does with an operator-made Secret."""

    #: The passwords Redis accepts after the pass, by digest (the Secret's first).
    digests: tuple[str, ...]
    #: Give it a new password (due, or the Secret has none, or it belonged to another Swarm's life).
    rotate: bool = False
    #: Remove the replaced password's digest from the Secret: its overlap is over.
    forget_previous: bool = False


def plan(
    secret: Mapping[str, Any], *, uid: str, now: float, rotation_seconds: float, interval_seconds: float
) -> Plan:
    """Decide a pass over an operator-made Secret (pure)."""
    metadata = secret.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    password = decoded(secret, "password")
    rotated_at = _parse_time(annotations.get(labels.ROTATED_AT))
    previous = str(annotations.get(labels.PREVIOUS_DIGEST) or "")
    owned = any(isinstance(r, Mapping) and r.get("uid") == uid for r in metadata.get("ownerReferences") or [])
    # A previous password is kept for at least one interval after the rotation that replaced it.
    overlapping = bool(previous) and rotated_at is not None and now - rotated_at < interval_seconds
    kept = (previous,) if overlapping else ()
    due = rotation_seconds > 0 and (rotated_at is None or now - rotated_at >= rotation_seconds)
    if not password:
        return Plan(digests=kept, rotate=True)
    if not owned or due:
        return Plan(digests=(acl.digest(password), *kept), rotate=True)
    return Plan(digests=(acl.digest(password), *kept), forget_previous=bool(previous) and not overlapping)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Verdict:
    """What a swarm's workers get, as its condition says it; ``mounted`` is whether Pods mount it."""

    ready: bool
    reason: str
    message: str
    mounted: bool = True

    def condition(self) -> status_.Condition:
        return status_.condition(type_=CONDITION, status=self.ready, reason=self.reason, message=self.message)


def ready(swarm: SwarmRef, *, user: str) -> Verdict:
    return Verdict(
        ready=True,
        reason="Ready",
        message=f"Workers report as Redis user {user} from Secret {swarm.secret}: it may write only this "
        "swarm's heartbeats and outcomes.",
    )


def supplied(swarm: SwarmRef, secret: Mapping[str, Any]) -> Verdict:
    missing = [k for k in ("username", "password") if not decoded(secret, k)]
    if not decoded(secret, "url") and decoded(secret, "mode") != "sentinel":
        missing.append("url")
    if missing:
        return Verdict(
            ready=False,
            reason="SuppliedIncomplete",
            message=f"The supplied Secret {swarm.secret} has no {', '.join(missing)}: workers cannot use it "
            "and report with what their template gives them (docs/workers.md).",
        )
    return Verdict(
        ready=True,
        reason="Supplied",
        message=f"Workers get the supplied Secret {swarm.secret}; the operator never rotates or changes it.",
    )


def redis_refused(swarm: SwarmRef, e: errors.AclRefused) -> Verdict:
    return Verdict(
        ready=False,
        reason="RedisRefusedUser",
        message=f"{e}. The operator cannot make this swarm's worker user, so its workers get no Redis "
        f"credential and report with what their template gives them. Supply one: a Secret {swarm.secret} "
        f"in namespace {swarm.namespace} with the keys url, username and password of a Redis user that may "
        f"write only this swarm's heartbeats and outcomes, annotated {labels.SUPPLIED}=true "
        "(docs/workers.md).",
    )


def secret_refused(swarm: SwarmRef, e: errors.ApiRefused) -> Verdict:
    return Verdict(
        ready=False,
        reason="SecretRefused",
        message=f"The API server refused the worker credential Secret {swarm.secret}: {e}. Grant the "
        "operator get, create and patch on secrets in this namespace (docs/workers.md); until then its "
        "workers mount a Secret of that name only if an admin supplied one.",
    )


def not_ours(swarm: SwarmRef) -> Verdict:
    return Verdict(
        ready=False,
        reason="SecretNotOurs",
        message=f"Secret {swarm.secret} exists, but the operator did not make it and it is not annotated "
        f"{labels.SUPPLIED}=true, so workers do not mount it. Annotate it if it is a credential you supply, "
        "or delete it to let the operator make one (docs/workers.md).",
        mounted=False,
    )
