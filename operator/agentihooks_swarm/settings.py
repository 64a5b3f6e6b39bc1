"""Settings, read once from ``AGENTIHOOKS_SWARM_*`` environment variables.

Every setting is a field below with its meaning; the Helm chart sets the same variables. The log
read limits and ``LOG_READS`` are deliberately *not* here: the spec fixes them in code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

import pydantic

from agentihooks_swarm import errors, text

PREFIX = "AGENTIHOOKS_SWARM_"


class Settings(pydantic.BaseModel):
    """The operator's configuration. Build it with :meth:`from_env`."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    redis_url: str = pydantic.Field(
        default="redis://127.0.0.1:6379/0",
        description="Redis URL: redis://[user:password@]host:port/db, or rediss:// for TLS.",
    )
    redis_username: str | None = pydantic.Field(
        default=None,
        description="Redis ACL user, when REDIS_URL names none (sentinel mode: the user on the primary). "
        "The records reader's Pod sets its read-only user here.",
    )
    redis_password: str | None = pydantic.Field(
        default=None, description="Redis password; overrides any password in the URL."
    )
    redis_ca_file: str | None = pydantic.Field(
        default=None, description="CA bundle to verify a rediss:// server with."
    )
    redis_tls: bool = pydantic.Field(
        default=False,
        description="sentinel mode: TLS to the Sentinels and the primary, verified against the system's "
        "trusted CAs unless REDIS_CA_FILE names a bundle (which turns TLS on too). Other modes: "
        "rediss:// in REDIS_URL says TLS.",
    )
    redis_tls_check_hostname: bool = pydantic.Field(
        default=True,
        description="Over TLS, refuse a Redis server whose certificate does not name the host connected "
        "to. false only for a private CA whose certificates lack proper names (logged as a warning): "
        "any certificate that CA signed is then accepted for any host.",
    )
    redis_timeout_seconds: float = pydantic.Field(
        default=5.0, gt=0, description="Connect and command timeout for Redis."
    )
    redis_mode: Literal["standalone", "sentinel", "cluster"] = pydantic.Field(
        default="standalone",
        description="standalone: REDIS_URL is the server. sentinel: REDIS_SENTINELS find the primary "
        "named REDIS_SENTINEL_MASTER. cluster: REDIS_URL is any node of a Redis Cluster.",
    )
    redis_sentinels: str = pydantic.Field(
        default="",
        description="sentinel mode: comma-separated host:port of the Sentinels, e.g. 'a:26379,b:26379'.",
    )
    redis_sentinel_master: str = pydantic.Field(
        default="mymaster", min_length=1, description="sentinel mode: the monitored primary's name."
    )
    redis_sentinel_password: str | None = pydantic.Field(
        default=None, description="sentinel mode: password of the Sentinels themselves (if they have one)."
    )
    redis_min_replicas: int = pydantic.Field(
        default=0,
        ge=0,
        description="Replicas that must acknowledge each evidence write (Redis WAIT) before the delete "
        "that depends on it; 0 trusts the primary alone.",
    )
    redis_min_replicas_timeout_seconds: float = pydantic.Field(
        default=2.0,
        gt=0,
        description="How long WAIT waits for REDIS_MIN_REPLICAS; not acknowledged in time keeps the Pod.",
    )
    retention_seconds: float = pydantic.Field(
        default=0.0,
        ge=0,
        description="How long an execution's records are kept after its cleanup finished; 0 (the "
        "default) keeps them for good, as the records' readers expect. A retention frees Redis memory "
        "(up to 64 KiB of log per container of each refused Pod) and frees the names of Executions for "
        "use again once their records are gone.",
    )
    retention_sweep_interval_seconds: float = pydantic.Field(
        default=300.0, gt=0, description="Seconds between the leader's retention sweeps."
    )
    swarm_quota_bytes: int = pydantic.Field(
        default=64 * 1024 * 1024,
        ge=0,
        description="The most bytes one swarm's keys may take in Redis (as Redis measures them) before "
        "its new Executions wait in phase Blocked (reason QuotaExceeded) until retention or `records "
        "forget` brings it back under; the default is 64 MiB. Workers already running are captured and "
        "cleaned up as always. 0 turns the blocking off (the bytes are still measured and exported).",
    )
    key_prefix: str = pydantic.Field(
        default="agentihooks-swarm",
        min_length=1,
        description="Root of every Redis key: PREFIX:{SLUG}:NAME.",
    )
    namespace: str | None = pydantic.Field(
        default=None,
        description="A namespace served when `run` has no --namespace: one more than NAMESPACES "
        "(both unset: every namespace).",
    )
    namespaces: str = pydantic.Field(
        default="",
        description="Comma-separated namespaces served when `run` has no --namespace (`run -n A -n B` "
        "sets them): the operator lists and watches each of them alone, never the whole cluster, so a "
        "Role in each is all it needs there. Empty, with NAMESPACE unset: every namespace.",
    )
    api_timeout_seconds: float = pydantic.Field(
        default=10.0, gt=0, description="Timeout of one Kubernetes API request (log reads included)."
    )
    metrics_port: int = pydantic.Field(
        default=9090, ge=0, le=65535, description="Port of the Prometheus /metrics endpoint; 0 turns it off."
    )
    metrics_tls_cert_file: str | None = pydantic.Field(
        default=None,
        description="Serve /metrics over TLS with this certificate (PEM, with METRICS_TLS_KEY_FILE); read "
        "at start. Unset: plain HTTP.",
    )
    metrics_tls_key_file: str | None = pydantic.Field(
        default=None, description="The private key (PEM) of METRICS_TLS_CERT_FILE."
    )
    metrics_authorize: bool = pydantic.Field(
        default=False,
        description="Check each scrape's bearer token with the API server: a TokenReview, then a "
        "SubjectAccessReview that the user may get the non-resource URL /metrics (401 or 403 otherwise). "
        "Needs METRICS_TLS_CERT_FILE, and RBAC to create tokenreviews and subjectaccessreviews.",
    )
    archive_deadline_seconds: float = pydantic.Field(
        default=900.0,
        gt=0,
        description="How long cleanup waits for the transcript archive after an attempt is final.",
    )
    cleanup_interval_seconds: float = pydantic.Field(
        default=10.0,
        gt=0,
        description="Seconds between checks of an Execution for finality and cleanup (and retries).",
    )
    startup_deadline_seconds: int = pydantic.Field(
        default=600,
        ge=1,
        description="A worker's startup deadline when its Swarm's worker template sets no "
        "startupDeadlineSeconds: seconds until its containers must all have started.",
    )
    ttl_seconds_after_finished: int | None = pydantic.Field(
        default=None,
        ge=0,
        description="Seconds a Done Execution is kept before it is deleted, unless its "
        "spec.ttlSecondsAfterFinished says otherwise (unset: kept). Its records stay in Redis.",
    )
    lease_namespace: str | None = pydantic.Field(
        default=None,
        description="Namespace of the leadership Lease; defaults to the first namespace served, else "
        "'default'.",
    )
    lease_name: str = pydantic.Field(
        default="agentihooks-swarm-controller", min_length=1, description="Name of the leadership Lease."
    )
    lease_duration_seconds: float = pydantic.Field(
        default=15.0, ge=5, description="How long a leader's Lease lasts without renewal."
    )

    worker_redis_url: str | None = pydantic.Field(
        default=None,
        description="The Redis address a worker reports to, given to it in its Swarm's Secret "
        "swarm-worker-redis-SWARM (docs/workers.md): redis://host:port/db or rediss://. Unset: REDIS_URL "
        "without its user and password (sentinel mode: the Sentinels of REDIS_SENTINELS).",
    )
    worker_credentials_interval_seconds: float = pydantic.Field(
        default=300.0,
        gt=0,
        description="Seconds between the leader's passes over the workers' Redis users: each is made "
        "again (a restarted Redis or a new primary has lost it), rotated when due, and a replaced "
        "password is dropped on the first pass one interval after its rotation.",
    )
    worker_credentials_rotation_seconds: float = pydantic.Field(
        default=86_400.0,
        ge=0,
        description="How often each swarm's worker password is replaced; the previous one stays valid "
        "for one more WORKER_CREDENTIALS_INTERVAL_SECONDS. 0 never rotates.",
    )

    reader_password: str | None = pydantic.Field(
        default=None,
        description="The records reader's Redis password (docs/security.md): the controller makes the "
        "read-only ACL user KEY_PREFIX-records with it at startup and on every worker-credentials pass. "
        "Unset: no reader user is made (an admin supplies one).",
    )
    allow_force_forget: bool = pydantic.Field(
        default=False,
        description="Whether `records forget --force` may remove records without the checks (owning "
        "Execution gone, cleanup finished, an Event left). Off: --force is refused.",
    )

    # What a Swarm may put in its workers (docs/security.md, "What a Swarm author may put in a
    # worker"); the chart's ValidatingAdmissionPolicy enforces the same rules at admission.
    worker_service_account: str | None = pydantic.Field(
        default=None,
        description="The ServiceAccount a worker Pod runs as when its Swarm's spec.worker names none, "
        "and one it may name. Unset: such a Pod runs as its namespace's `default` (no token is mounted "
        "either way). The chart sets RELEASE-worker, which it creates with no RBAC.",
    )
    worker_service_accounts: str = pydantic.Field(
        default="",
        description="Comma-separated ServiceAccounts a Swarm's spec.worker.serviceAccountName may name "
        "besides WORKER_SERVICE_ACCOUNT; `*` allows any. Empty: that one only.",
    )
    worker_secret_prefixes: str = pydantic.Field(
        default="swarm-worker-",
        description="Comma-separated name prefixes of the Secrets a worker's env may read "
        "(spec.worker.env[].valueFrom.secretKeyRef.name). Never allowed, whatever this and "
        "WORKER_SECRETS say: swarm-worker-redis-* (the operator's own worker credentials), "
        "sh.helm.release.v1.* (Helm's releases) and WORKER_DENIED_SECRETS. A lone `,` allows no prefix.",
    )
    worker_secrets: str = pydantic.Field(
        default="",
        description="Comma-separated names of further Secrets a worker's env may read; `*` allows any "
        "but the never-allowed ones.",
    )
    worker_denied_secrets: str = pydantic.Field(
        default="",
        description="Comma-separated names of Secrets no worker may read: the chart sets the Redis "
        "Secrets the controller reads (the bundled Redis's password).",
    )
    worker_metadata_prefixes: str = pydantic.Field(
        default="",
        description="Comma-separated key prefixes (e.g. `example.com/`) under which a Swarm may put "
        "labels and annotations on its workers; `*` allows any. Keys without a prefix (`team`) are "
        "always allowed, keys under the operator's own swarm.agentihooks.io never. Empty: no prefixed "
        "key, so none under kubernetes.io, k8s.io or a sidecar injector's domain.",
    )

    # What the operator shows of a worker's text outside Redis is redacted (docs/security.md,
    # "Redaction"): the built-in patterns, these, and a Swarm's spec.redaction.patterns.
    redact_patterns: str = pydantic.Field(
        default="",
        description="Regular expressions, one a line, whose matches are replaced by <redacted> in "
        "everything the operator shows of a worker's text outside Redis (Events, the Swarm's status, its "
        "log, `records` views), beside the built-in patterns for common secrets; a pattern's group named "
        "`secret` replaces only that group. At most 32, each at most 512 characters, none repeating a "
        "repeated group.",
    )
    store_redacted: bool = pydantic.Field(
        default=False,
        description="Also redact the captured text before it is stored in Redis (container logs, "
        "termination and waiting messages, Event messages); the capture then says `redacted: true`. Off "
        "by default: the stored log is what the worker printed.",
    )

    @pydantic.field_validator("redact_patterns")
    @classmethod
    def _patterns(cls, value: str) -> str:
        text.Redactor.of(_lines(value))  # raises InvalidPattern, a ValueError: the setting is invalid
        return value

    def redactor(self) -> text.Redactor:
        """The built-in patterns and ``redact_patterns``."""
        return text.Redactor.of(_lines(self.redact_patterns))

    @pydantic.model_validator(mode="after")
    def _topology(self) -> Settings:
        if self.redis_mode == "sentinel" and not self.sentinel_addresses:
            raise ValueError(f"{PREFIX}REDIS_MODE=sentinel needs {PREFIX}REDIS_SENTINELS (host:port,...)")
        if self.redis_min_replicas and self.redis_min_replicas_timeout_seconds >= self.redis_timeout_seconds:
            raise ValueError(
                f"{PREFIX}REDIS_MIN_REPLICAS_TIMEOUT_SECONDS must be below {PREFIX}REDIS_TIMEOUT_SECONDS "
                "(WAIT answers within the first; the client stops reading after the second)"
            )
        if self.redis_mode != "sentinel" and self.redis_sentinels.strip():
            raise ValueError(f"{PREFIX}REDIS_SENTINELS is set but {PREFIX}REDIS_MODE is not sentinel")
        if (self.metrics_tls_cert_file is None) != (self.metrics_tls_key_file is None):
            raise ValueError(f"{PREFIX}METRICS_TLS_CERT_FILE and {PREFIX}METRICS_TLS_KEY_FILE go together")
        if self.metrics_authorize and self.metrics_tls_cert_file is None:
            # A bearer token sent in the clear could be replayed by anyone on the path.
            raise ValueError(
                f"{PREFIX}METRICS_AUTHORIZE needs {PREFIX}METRICS_TLS_CERT_FILE (tokens over TLS only)"
            )
        return self

    @property
    def served_namespaces(self) -> tuple[str, ...]:
        """The namespaces served, NAMESPACE first, each once; empty: every namespace."""
        found = [self.namespace or "", *self.namespaces.split(",")]
        return tuple(dict.fromkeys(name.strip() for name in found if name.strip()))

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """``redis_sentinels`` as (host, port) pairs; a port-less entry means 26379."""
        found: list[tuple[str, int]] = []
        for item in (part.strip() for part in self.redis_sentinels.split(",")):
            if not item:
                continue
            host, _, port = item.rpartition(":") if ":" in item else (item, "", "26379")
            if not port.isdigit():
                raise ValueError(f"{PREFIX}REDIS_SENTINELS entry {item!r} is not host:port")
            found.append((host.strip("[]"), int(port)))
        return found

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every field from ``AGENTIHOOKS_SWARM_<FIELD>``; unknown variables are ignored."""
        environ = os.environ if environ is None else environ
        values = {
            name: environ[PREFIX + name.upper()]
            for name in cls.model_fields
            if environ.get(PREFIX + name.upper(), "") != ""
        }
        try:
            return cls.model_validate(values)
        except pydantic.ValidationError as e:
            problems = "; ".join(
                f"{PREFIX}{str(error['loc'][0]).upper()}={error.get('input')!r}: {error['msg']}"
                if error["loc"]
                else error["msg"]
                for error in e.errors()
            )
            raise InvalidSettings(f"Invalid settings: {problems}") from e


def _lines(value: str) -> list[str]:
    return [line for line in value.splitlines() if line.strip()]


class InvalidSettings(errors.SwarmError, ValueError):
    """An ``AGENTIHOOKS_SWARM_*`` variable has a value the operator cannot use."""
