"""The custom resources, as pydantic models of their specs.

The CRDs in ``manifests/crds/`` validate what the API server can; these models check the rest
(names that must fit into labels and object names) and turn anything malformed into one
:class:`~agentihooks_swarm.errors.InvalidResource` with a message that says what to fix.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

import pydantic

from agentihooks_swarm import errors, text

GROUP: Final = "swarm.agentihooks.io"
VERSION: Final = "v1alpha1"

#: A DNS-1035 label short enough that ``swarm-terminal-<name>-<generation>`` is still one.
_EXECUTION_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
#: A slug short enough that ``agentihooks-swarm-<slug>`` is still a label value.
_SLUG = re.compile(r"^[a-z0-9]([-a-z0-9]{0,43}[a-z0-9])?$")


#: The most bytes ``spec.task`` may take in the grant (:func:`encode`): the grant ConfigMap holds
#: at most 1 MiB (1,048,576 bytes), and the grant's other fields take well under 48 KiB.
MAX_TASK_BYTES: Final = 1_000_000
#: The CRD cannot say it: ``task`` has no type (any JSON value), and a field without a type is
#: invisible to CEL rules ("unable to convert structural schema to CEL declarations").


def encode(value: Any) -> str:
    """JSON as the grant stores it: sorted keys, UTF-8 text (non-ASCII is not escaped)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


class _Spec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class Registration(_Spec):
    projects: list[str] = pydantic.Field(default_factory=list)


class WorkerTemplate(_Spec):
    image: str = pydantic.Field(min_length=1)
    command: list[str] = pydantic.Field(default_factory=list)
    args: list[str] = pydantic.Field(default_factory=list)
    env: list[dict[str, Any]] = pydantic.Field(default_factory=list)
    resources: dict[str, Any] = pydantic.Field(default_factory=dict)
    terminal_port: int | None = pydantic.Field(default=None, alias="terminalPort", ge=1, le=65535)
    annotations: dict[str, str] = pydantic.Field(default_factory=dict)
    labels: dict[str, str] = pydantic.Field(default_factory=dict)
    service_account_name: str | None = pydantic.Field(default=None, alias="serviceAccountName")
    security_context: dict[str, Any] = pydantic.Field(default_factory=dict, alias="securityContext")
    #: Seconds a worker's containers may take to all start; then the operator sets the Pod's
    #: activeDeadlineSeconds (or, never scheduled, ends the attempt). None: the setting's default.
    startup_deadline_seconds: int | None = pydantic.Field(default=None, alias="startupDeadlineSeconds", ge=1)


class RefusalBudget(_Spec):
    """How many refused worker Pods (of one fingerprint, with ``same_fingerprint``) within a
    window hold the swarm's new Executions back (the CRD bounds them too)."""

    max_refusals: int = pydantic.Field(alias="maxRefusals", ge=1, le=10_000)
    window_seconds: int = pydantic.Field(alias="windowSeconds", ge=1, le=86_400)
    same_fingerprint: bool = pydantic.Field(default=False, alias="sameFingerprint")


class Redaction(_Spec):
    """What else to redact from the Swarm's workers' text wherever the operator shows it: regular
    expressions beside the built-in ones (``text.py``), checked here so that a bad one makes
    the Swarm invalid with a message rather than an error at the first refusal."""

    patterns: list[str] = pydantic.Field(default_factory=list)

    @pydantic.field_validator("patterns")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        text.Redactor.of(value, defaults=False)  # raises InvalidPattern, a ValueError
        return value


class SwarmSpec(_Spec):
    registration: Registration = pydantic.Field(default_factory=Registration)
    worker: WorkerTemplate
    refusal_budget: RefusalBudget | None = pydantic.Field(default=None, alias="refusalBudget")
    redaction: Redaction = pydantic.Field(default_factory=Redaction)


def template_digest(swarm: Mapping[str, Any]) -> str:
    """The digest of a Swarm object's worker template: a change of it clears a tripped budget."""
    spec = swarm.get("spec")
    worker = spec.get("worker") if isinstance(spec, Mapping) else None
    return hashlib.sha256(encode(worker).encode()).hexdigest()[:16]


def reset_stamp(swarm: Mapping[str, Any], *, reset_annotation: str) -> str:
    """The value of the Swarm's annotation ``reset_annotation`` ('' without one)."""
    metadata = swarm.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    value = annotations.get(reset_annotation) if isinstance(annotations, Mapping) else None
    return str(value or "")


class ExecutionSpec(_Spec):
    swarm: str = pydantic.Field(min_length=1)
    project: str = pydantic.Field(min_length=1)
    task: Any = None
    cancel: bool = False


def _explain(e: pydantic.ValidationError) -> str:
    parts = []
    for error in e.errors():
        where = ".".join(str(p) for p in error["loc"]) or "spec"
        parts.append(f"spec.{where}: {error['msg']}")
    return "; ".join(parts)


def _plain(spec: Any) -> dict[str, Any]:
    # A spec is the API server's JSON object, or any Mapping; anything else is not a spec at all.
    return {str(k): v for k, v in spec.items()} if isinstance(spec, Mapping) else {}


def parse_swarm(*, name: str, spec: Any) -> SwarmSpec:
    if not _SLUG.match(name):
        raise errors.InvalidResource(
            f"Swarm name {name!r} is not a usable slug: use 1-45 lowercase letters, digits and '-'"
        )
    try:
        return SwarmSpec.model_validate(_plain(spec))
    except pydantic.ValidationError as e:
        raise errors.InvalidResource(f"Swarm {name}: {_explain(e)}") from e


def parse_execution(*, name: str, spec: Any) -> ExecutionSpec:
    if not _EXECUTION_NAME.match(name):
        raise errors.InvalidResource(
            f"Execution name {name!r} cannot name its worker objects: use 1-40 lowercase letters, "
            "digits and '-', starting with a letter"
        )
    try:
        parsed = ExecutionSpec.model_validate(_plain(spec))
    except pydantic.ValidationError as e:
        raise errors.InvalidResource(f"Execution {name}: {_explain(e)}") from e
    size = len(encode(parsed.task).encode())
    if size > MAX_TASK_BYTES:
        raise errors.InvalidResource(
            f"Execution {name}: spec.task takes {size} bytes as JSON, more than the {MAX_TASK_BYTES} "
            "its grant ConfigMap can hold; hand the worker a reference to the data instead"
        )
    return parsed
