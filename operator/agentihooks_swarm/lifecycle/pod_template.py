"""The worker Pod a launch creates: its spec from the Swarm's worker template, its labels, owner
and evidence finalizer, its grant and credential mounts. Pure: :func:`launch.ensure_pod` sends it."""

from __future__ import annotations

from typing import Any

from agentihooks_swarm import resources
from agentihooks_swarm.kubernetes import labels, owners
from agentihooks_swarm.lifecycle import model

GRANT_MOUNT = "/etc/agentihooks/grant"


def pod_body(
    *,
    attempt: model.Attempt,
    worker: resources.WorkerTemplate,
    startup_deadline_seconds: int = 600,
    credential: str | None = None,
) -> dict[str, Any]:
    """The worker Pod: restartPolicy Never, the attempt's labels, its grant mounted read-only, and
    its swarm's Redis credential (the Secret ``credential``) mounted read-only.

    Its startup deadline (the template's, else ``startup_deadline_seconds``) rides on the Pod as
    an annotation, so every later pass reads it from the Pod it judges.
    """
    deadline = worker.startup_deadline_seconds or startup_deadline_seconds
    grant = labels.grant_name(execution=attempt.execution, generation=attempt.generation)
    container: dict[str, Any] = {
        "name": "worker",
        "image": worker.image,
        "env": [
            {"name": "AGENTIHOOKS_SWARM_EXECUTION", "value": attempt.execution},
            {"name": "AGENTIHOOKS_SWARM_GENERATION", "value": str(attempt.generation)},
            {"name": "AGENTIHOOKS_SWARM_SLUG", "value": attempt.slug},
            *worker.env,
        ],
        "volumeMounts": [{"name": "grant", "mountPath": GRANT_MOUNT, "readOnly": True}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if worker.command:
        container["command"] = list(worker.command)
    if worker.args:
        container["args"] = list(worker.args)
    if worker.resources:
        container["resources"] = dict(worker.resources)
    if worker.terminal_port is not None:
        container["ports"] = [{"name": "terminal", "containerPort": worker.terminal_port}]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        # Pod Security "restricted" by default; the template may add a runAsUser for root images.
        "securityContext": {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
            **worker.security_context,
        },
        "containers": [container],
        "volumes": [{"name": "grant", "configMap": {"name": grant, "optional": False}}],
    }
    if worker.service_account_name:
        spec["serviceAccountName"] = worker.service_account_name
    if credential is not None:
        _mount_credential(container, spec, secret=credential)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": attempt.pod_name,
            "namespace": attempt.namespace,
            "labels": {**worker.labels, **attempt.labels},
            "annotations": {**worker.annotations, labels.STARTUP_DEADLINE: str(deadline)},
            "ownerReferences": [owners.execution_reference(name=attempt.execution, uid=attempt.owner_uid)],
            "finalizers": [owners.EVIDENCE_FINALIZER],
        },
        "spec": spec,
    }


def _mount_credential(container: dict[str, Any], spec: dict[str, Any], *, secret: str) -> None:
    """The worker's Redis credential (docs/workers.md). Optional: a missing Secret never holds the
    Pod back (it would wait in CreateContainerConfigError, a refusal the worker did not cause), and
    one supplied later appears in the running Pod."""
    # Last, so the template's env cannot point the commands elsewhere under the same name.
    container["env"].append({"name": labels.CREDENTIAL_ENV, "value": labels.CREDENTIAL_MOUNT})
    container["volumeMounts"].append(
        {"name": "worker-redis", "mountPath": labels.CREDENTIAL_MOUNT, "readOnly": True}
    )
    spec["volumes"].append({"name": "worker-redis", "secret": {"secretName": secret, "optional": True}})
