"""Settings, read once from ``AGENTIHOOKS_SWARM_*`` environment variables.

Every setting is a field below with its meaning; the Helm chart sets the same variables. The log
read limits and ``LOG_READS`` are deliberately *not* here: the spec fixes them in code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pydantic

from agentihooks_swarm import errors

PREFIX = "AGENTIHOOKS_SWARM_"


class Settings(pydantic.BaseModel):
    """The operator's configuration. Build it with :meth:`from_env`."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    redis_url: str = pydantic.Field(
        default="redis://127.0.0.1:6379/0",
        description="Redis URL: redis://[user:password@]host:port/db, or rediss:// for TLS.",
    )
    redis_password: str | None = pydantic.Field(
        default=None, description="Redis password; overrides any password in the URL."
    )
    redis_ca_file: str | None = pydantic.Field(
        default=None, description="CA bundle to verify a rediss:// server with."
    )
    redis_timeout_seconds: float = pydantic.Field(
        default=5.0, gt=0, description="Connect and command timeout for Redis."
    )
    key_prefix: str = pydantic.Field(
        default="agentihooks-swarm",
        min_length=1,
        description="Root of every Redis key: PREFIX:{SLUG}:NAME.",
    )
    namespace: str | None = pydantic.Field(
        default=None,
        description="Namespace served when `run` has no --namespace (unset: all namespaces).",
    )
    api_timeout_seconds: float = pydantic.Field(
        default=10.0, gt=0, description="Timeout of one Kubernetes API request (log reads included)."
    )
    metrics_port: int = pydantic.Field(
        default=9090, ge=0, le=65535, description="Port of the Prometheus /metrics endpoint; 0 turns it off."
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
    lease_namespace: str | None = pydantic.Field(
        default=None,
        description="Namespace of the leadership Lease; defaults to NAMESPACE, else 'default'.",
    )
    lease_name: str = pydantic.Field(
        default="agentihooks-swarm-controller", min_length=1, description="Name of the leadership Lease."
    )
    lease_duration_seconds: float = pydantic.Field(
        default=15.0, ge=5, description="How long a leader's Lease lasts without renewal."
    )

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
                for error in e.errors()
            )
            raise InvalidSettings(f"Invalid settings: {problems}") from e


class InvalidSettings(errors.SwarmError, ValueError):
    """An ``AGENTIHOOKS_SWARM_*`` variable has a value the operator cannot use."""
