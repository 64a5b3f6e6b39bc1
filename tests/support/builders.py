"""Builders for the operator's custom resources, with option arguments instead of pasted YAML."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tests.support import pods

API_VERSION = "swarm.agentihooks.io/v1alpha1"


def swarm(
    *,
    name: str,
    namespace: str,
    projects: Sequence[str] = ("allowed",),
    image: str = pods.WORKER_IMAGE,
    annotations: Mapping[str, str] | None = None,
    terminal_port: int | None = None,
    env: Sequence[Mapping[str, Any]] = (),
    command: Sequence[str] = ("/bin/worker",),
    resources: Mapping[str, Any] | None = None,
    startup_deadline_seconds: int | None = None,
    refusal_budget: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    worker: dict[str, Any] = {
        "image": image,
        "command": list(command),
        "annotations": dict(annotations or {}),
        "env": [dict(e) for e in env],
    }
    if terminal_port is not None:
        worker["terminalPort"] = terminal_port
    if resources:
        worker["resources"] = dict(resources)
    if startup_deadline_seconds is not None:
        worker["startupDeadlineSeconds"] = startup_deadline_seconds
    spec: dict[str, Any] = {"registration": {"projects": list(projects)}, "worker": worker}
    if refusal_budget is not None:
        spec["refusalBudget"] = dict(refusal_budget)
    return {
        "apiVersion": API_VERSION,
        "kind": "Swarm",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def execution(
    *,
    name: str,
    namespace: str,
    swarm: str,
    project: str = "allowed",
    task: Any = None,
    cancel: bool = False,
    ttl: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"swarm": swarm, "project": project, "task": task or {"goal": "test"}}
    if cancel:
        spec["cancel"] = True
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    return {
        "apiVersion": API_VERSION,
        "kind": "Execution",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
