"""Label keys on worker Pods and their objects, the owner value, and selectors.

A worker Pod belongs to an attempt when all three labels match: the controller owner (derived
from the swarm slug), the execution id and the attempt generation. Anything else is foreign.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

GROUP: Final = "swarm.agentihooks.io"
OWNER: Final = f"{GROUP}/controller-owner"
EXECUTION: Final = f"{GROUP}/execution-id"
GENERATION: Final = f"{GROUP}/generation"
#: Annotation on a worker Pod: its startup deadline in seconds (the Swarm template's, or the default).
STARTUP_DEADLINE: Final = f"{GROUP}/startup-deadline-seconds"
#: Annotation the operator sets on a worker Pod together with its ``activeDeadlineSeconds``: the
#: containers' waiting states at that moment (JSON). A real kubelet that fails the Pod replaces a
#: never-started container's ``waiting`` (e.g. ImagePullBackOff) with ``terminated:
#: ContainerStatusUnknown``, so the capture would otherwise lose why it never started.
WAITING_AT_DEADLINE: Final = f"{GROUP}/waiting-at-deadline"


def owner(slug: str) -> str:
    """The controller-owner label value of a swarm's worker Pods."""
    return f"agentihooks-swarm-{slug}"


def slug_of(owner_value: str) -> str | None:
    """The swarm slug of a controller-owner label value (None: not one this operator sets)."""
    prefix = owner("")
    slug = owner_value.removeprefix(prefix)
    return slug if owner_value.startswith(prefix) and slug else None


def attempt(*, slug: str, execution: str, generation: int) -> dict[str, str]:
    """The three labels that tie an object to one attempt."""
    return {OWNER: owner(slug), EXECUTION: execution, GENERATION: str(generation)}


def matches(actual: Mapping[str, str] | None, expected: Mapping[str, str]) -> bool:
    """Whether ``actual`` labels carry every expected key with the expected value."""
    actual = actual or {}
    return all(actual.get(k) == v for k, v in expected.items())


def selector(expected: Mapping[str, str]) -> str:
    """A label selector for exactly these labels."""
    return ",".join(f"{k}={v}" for k, v in sorted(expected.items()))


def worker_pod_name(*, execution: str, generation: int) -> str:
    return f"swarm-worker-{execution}-{generation}"


def grant_name(*, execution: str, generation: int) -> str:
    return f"swarm-grant-{execution}-{generation}"


def terminal_name(*, execution: str, generation: int) -> str:
    return f"swarm-terminal-{execution}-{generation}"


#: The finalizer earlier versions put on the Executions they launched: removed once their cleanup
#: is done (this version puts none on: the worker Pod's evidence finalizer keeps its evidence).
FINALIZER: Final = "swarm.agentihooks.io/cleanup"


# --- the workers' Redis credential (docs/workers.md) -----------------------------------------------

#: Label on a swarm's worker credential Secret that the operator made: the swarm it serves.
CREDENTIAL: Final = f"{GROUP}/worker-credential"
#: Annotation (value ``"true"``) an admin puts on a credential Secret they made themselves (a managed
#: Redis that refuses ``ACL SETUSER``): the operator mounts it and never changes it.
SUPPLIED: Final = f"{GROUP}/supplied"
#: Annotations of an operator-made credential: when its password was last replaced, and the replaced
#: password's SHA-256 (still valid until the next pass one interval later; then removed).
ROTATED_AT: Final = f"{GROUP}/rotated-at"
PREVIOUS_DIGEST: Final = f"{GROUP}/previous-password-sha256"
#: Where a worker container finds its credential's files (the Secret's keys), and the variable that
#: says so.
CREDENTIAL_MOUNT: Final = "/etc/agentihooks/redis"
CREDENTIAL_ENV: Final = "AGENTIHOOKS_SWARM_WORKER_REDIS"


def worker_credential_name(slug: str) -> str:
    """The Secret with swarm ``slug``'s worker Redis credential, in the Swarm's namespace. Every
    ``swarm-worker-`` name is the operator's: a Swarm's worker template may not reference one."""
    return f"swarm-worker-redis-{slug}"
