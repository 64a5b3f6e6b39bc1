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


#: The operator's finalizer on the Executions it launches: removed once cleanup is done.
FINALIZER: Final = "swarm.agentihooks.io/cleanup"
