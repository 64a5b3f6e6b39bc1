"""Who a worker Pod belongs to: its controller ``ownerReference`` and the operator's evidence finalizer.

Labels say which attempt a Pod is *for*; anyone who may create Pods in the worker namespace can
write them. What only the operator writes is the controller reference to the Execution by UID (an
Execution's UID is fresh for every object, so a Pod made before the Execution existed, or for
another life of its name, cannot carry it), and the Pod's UID the launch recorded. A Pod judged
by labels alone could be a look-alike: adopted and handed another user's grant, or captured and
deleted by cleanup. So the operator acts only on Pods that are owned (:func:`owned`).

The evidence finalizer (:data:`EVIDENCE_FINALIZER`) is in every worker Pod's create body. With a
controller reference, the garbage collector deletes a worker Pod on its own once its Execution is
deleted, whatever the propagation (the Execution carries no finalizer of the operator's, and the
reference does not block, so the Execution goes first and its Pod after it; an orphaning delete
only strips the reference). The finalizer keeps such a Pod readable (terminating, not gone) until
the operator has stored its evidence and releases it: the evidence waits on the Pod, not on the
Execution.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from agentihooks_swarm.kubernetes.labels import GROUP

#: The finalizer on every worker Pod: removed by the operator after its evidence is stored.
EVIDENCE_FINALIZER: Final = f"{GROUP}/evidence"
EXECUTION_API_VERSION: Final = f"{GROUP}/v1alpha1"


def execution_reference(*, name: str, uid: str) -> dict[str, Any]:
    """The controller reference to an Execution, as a worker Pod carries it.

    ``blockOwnerDeletion`` is false: nothing needs the Execution to wait (the Pod's evidence
    finalizer keeps the evidence), and a blocking reference would need ``update`` on
    ``executions/finalizers`` wherever the API server enforces owner-reference permissions.
    """
    return {
        "apiVersion": EXECUTION_API_VERSION,
        "kind": "Execution",
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": False,
    }


def _metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    found = (obj or {}).get("metadata")
    return found if isinstance(found, Mapping) else {}


def controller_uid(obj: Mapping[str, Any] | None) -> str | None:
    """The UID of the object's controller reference, if that controller is an Execution."""
    for ref in _metadata(obj).get("ownerReferences") or []:
        if not isinstance(ref, Mapping) or ref.get("controller") is not True:
            continue
        if ref.get("kind") == "Execution" and ref.get("apiVersion") == EXECUTION_API_VERSION:
            uid = ref.get("uid")
            return uid if isinstance(uid, str) and uid else None
    return None


def owner_uids(obj: Mapping[str, Any] | None) -> frozenset[str]:
    """The UIDs of every owner reference the object carries (a grant ConfigMap's or Service's Pod)."""
    refs = _metadata(obj).get("ownerReferences") or []
    return frozenset(str(r["uid"]) for r in refs if isinstance(r, Mapping) and r.get("uid"))


def owned(obj: Mapping[str, Any] | None, *, execution_uid: str, pod_uid: str | None = None) -> bool:
    """Whether ``obj`` is the Execution's own Pod: its controller reference names the Execution's
    UID, or its UID is the one the launch recorded (``pod_uid``: an orphaning delete of the
    Execution strips the reference from its dependents, and the Pod stays the attempt's)."""
    if execution_uid and controller_uid(obj) == execution_uid:
        return True
    return bool(pod_uid) and _metadata(obj).get("uid") == pod_uid


def holds_evidence(obj: Mapping[str, Any] | None) -> bool:
    """Whether the object carries the operator's evidence finalizer."""
    finalizers = _metadata(obj).get("finalizers") or []
    return isinstance(finalizers, list) and EVIDENCE_FINALIZER in finalizers
