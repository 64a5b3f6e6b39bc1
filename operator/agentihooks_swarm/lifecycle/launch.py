"""Launch: create or adopt the worker Pod, hand it its grant, and launch removal.

Each step is one function taking its collaborators as keyword arguments, so the whole path runs
against a real API server and a real Redis in tests without kopf:

* :func:`ensure_pod` creates ``swarm-worker-<execution>-<generation>``, owned by its Execution (a
  controller reference by UID) and holding the evidence finalizer (:mod:`kubernetes.owners`), or
  adopts the Pod of that name when it is this attempt's own (:meth:`model.Attempt.owns`: its
  labels *and* its owner) and is not being deleted; any other Pod, a look-alike with the right
  name and labels included, is foreign and raises :class:`ForeignPod`.
* :func:`hand` checks the project against the registration, creates the grant ConfigMap (owned
  by the Pod) and the terminal Service; it returns the refusal reason or None.
* :func:`remove_at_launch` is the spec's launch removal: re-read, keep-or-capture, ``HSETNX``,
  delete by pinned UID (:mod:`.removal`, the loop final cleanup uses too). It runs once and
  answers whether the Pod was removed.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from agentihooks_swarm import errors, metrics, records, resources
from agentihooks_swarm.capture import causes, diagnostics
from agentihooks_swarm.kubernetes import core, labels, pods as pods_
from agentihooks_swarm.lifecycle import events, model, pod_template, removal as removal_, watched

logger = logging.getLogger(__name__)


class OwnPodTerminating(errors.SwarmError):
    """The attempt's own Pod is being deleted by someone else before the launch handed it: its
    evidence finalizer holds it until the launch has captured it and released it."""

    def __init__(self, message: str, *, pod: dict[str, Any]) -> None:
        super().__init__(message)
        self.pod = pod


class ForeignPod(errors.SwarmError):
    """A Pod with the worker's name exists but is not this attempt's: it is never touched.

    ``look_alike``: it carries this attempt's labels but not its owner (someone else made it)."""

    def __init__(self, message: str, *, look_alike: bool) -> None:
        super().__init__(message)
        self.look_alike = look_alike


def _owner_reference(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": pod["metadata"]["name"],
        "uid": pod["metadata"]["uid"],
    }


def is_ours(pod: dict[str, Any], *, attempt: model.Attempt) -> bool:
    return attempt.owns(pod) and not (pod.get("metadata") or {}).get("deletionTimestamp")


async def ensure_pod(
    *,
    pods: pods_.PodClient,
    attempt: model.Attempt,
    worker: resources.WorkerTemplate,
    startup_deadline_seconds: int = 600,
    credential: str | None = None,
    workers: watched.WorkerWatch | None = None,
    confirm: bool = False,
) -> dict[str, Any]:
    """Create the attempt's worker Pod, or adopt it if an earlier pass created it.

    An owned Pod of that name that the worker Pods' watch (``workers``) has seen, not being
    deleted, is adopted as the watch saw it, without the create that would answer 409: with
    ``confirm`` (the launch will hand it its grant) after one live read of it, else without a
    request (launch removal's own re-read judges it; :mod:`.watched` says why a stale view is
    harmless there). An earlier pass may have deleted the Pod and stopped before recording it
    (its launch removal), and a watch that lags still shows it alive: a grant is never handed to
    a Pod on its way out. Any other Pod is judged from a live read after the create.

    A 400 or 422 is the API server refusing the Pod the worker template builds: that raises
    :class:`~agentihooks_swarm.errors.SpecRejected`, which no retry can fix.
    """
    seen = workers.seen(namespace=attempt.namespace, name=attempt.pod_name) if workers else watched.UNKNOWN
    if seen.pod is not None and not seen.pod.deleting:
        known = seen.pod.as_object()
        if is_ours(known, attempt=attempt):
            if not confirm:
                logger.info(
                    "Adopted the existing worker pod %s/%s (as watched).", attempt.namespace, attempt.pod_name
                )
                return known
            live = await pods.read(namespace=attempt.namespace, name=attempt.pod_name)
            if live is not None:
                return _adopted(live, attempt=attempt)
            # Gone since the watch saw it (the watch lags): made anew below.
    body = pod_template.pod_body(
        attempt=attempt,
        worker=worker,
        startup_deadline_seconds=startup_deadline_seconds,
        credential=credential,
    )
    try:
        return await pods.create(namespace=attempt.namespace, body=body)
    except errors.AlreadyExists:
        pass
    except errors.ApiRefused as e:
        if errors.is_invalid(e):
            raise errors.SpecRejected(
                kind="Pod", namespace=attempt.namespace, name=attempt.pod_name, detail=_quote(e)
            ) from e
        raise
    existing = await pods.read(namespace=attempt.namespace, name=attempt.pod_name)
    if existing is None:  # Deleted between our create and read: try once more next pass.
        raise errors.ApiUnavailable(f"pod {attempt.pod_name} existed and vanished; will retry")
    return _adopted(existing, attempt=attempt)


def _adopted(existing: dict[str, Any], *, attempt: model.Attempt) -> dict[str, Any]:
    """``existing`` (the Pod under the worker's name, read live) if it is the attempt's own and
    not being deleted; else why not (raised, see :func:`ensure_pod`)."""
    if attempt.owns(existing) and (existing.get("metadata") or {}).get("deletionTimestamp"):
        raise OwnPodTerminating(
            f"pod {attempt.namespace}/{attempt.pod_name} is being deleted by someone else", pod=existing
        )
    if not is_ours(existing, attempt=attempt):
        metadata = existing.get("metadata") or {}
        look_alike = labels.matches(metadata.get("labels"), attempt.labels) and not attempt.owns(existing)
        why = (
            f"it has this attempt's labels but is not owned by Execution {attempt.execution} "
            f"(uid {attempt.owner_uid}): someone else made it"
            if look_alike
            else "other labels, or being deleted"
        )
        raise ForeignPod(
            f"pod {attempt.namespace}/{attempt.pod_name} exists but is not this attempt's ({why}); "
            "it is neither adopted, captured nor deleted",
            look_alike=look_alike,
        )
    logger.info("Adopted the existing worker pod %s/%s.", attempt.namespace, attempt.pod_name)
    return existing


def _grant(*, attempt: model.Attempt, project: str, task: Any) -> str:
    # UTF-8, not \u-escaped: resources.MAX_TASK_BYTES is measured the same way.
    return resources.encode(
        {
            "swarm": attempt.slug,
            "execution": attempt.execution,
            "generation": attempt.generation,
            "project": project,
            "task": task,
        }
    )


def _owned_by(obj: dict[str, Any] | None, *, pod: dict[str, Any]) -> bool:
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("uid") == pod["metadata"]["uid"] for r in refs)


def _quote(e: errors.ApiError) -> str:
    """The API server's answer, as a condition quotes it: status, reason and its own message."""
    if e.status is None:  # No answer at all: a timeout or a broken connection.
        return str(e)
    return f"{e.status} {e.reason}: {e.detail or e}".replace(" : ", ": ")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Refusal:
    """Why a hand was refused; ``detail`` names the object and quotes the API server, if one refused."""

    reason: records.HandReason
    detail: str = ""

    def describe(self) -> str:
        return f"{self.reason}; {self.detail}" if self.detail else str(self.reason)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Launched:
    """What :func:`launch` did: the spec's hand result, and the refusal's detail for the condition."""

    hand: records.HandResult
    detail: str = ""
    #: The worker Pod as the launch last saw it: the create's answer, the adoption's read, or the
    #: watch's view (:mod:`.watched`). Never a capture's read: only whether it has plainly not
    #: ended yet is judged from it.
    pod: dict[str, Any] | None = None


def _refused(reason: records.HandReason, *, kind: str, body: dict[str, Any], e: errors.ApiError) -> Refusal:
    metadata = body["metadata"]
    return Refusal(
        reason=reason,
        detail=f"the API server refused {kind} {metadata['namespace']}/{metadata['name']}: {_quote(e)}",
    )


async def hand(
    *,
    config_maps: core.CoreClient,
    services: core.CoreClient,
    attempt: model.Attempt,
    pod: dict[str, Any],
    swarm: resources.SwarmSpec,
    project: str,
    task: Any,
) -> Refusal | None:
    """Hand the Pod its grant. Returns the refusal, or None when handed."""
    if project not in swarm.registration.projects:
        return Refusal(reason=records.HandReason.PROJECT_UNPERMITTED)
    owner = [_owner_reference(pod)]
    config_map: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": labels.grant_name(execution=attempt.execution, generation=attempt.generation),
            "namespace": attempt.namespace,
            "labels": attempt.labels,
            "ownerReferences": owner,
        },
        "immutable": True,
        "data": {"grant.json": _grant(attempt=attempt, project=project, task=task)},
    }
    try:
        await config_maps.create(namespace=attempt.namespace, body=config_map)
    except errors.AlreadyExists:
        existing = await _read_quietly(
            config_maps.read, namespace=attempt.namespace, name=config_map["metadata"]["name"]
        )
        if not _owned_by(existing, pod=pod):  # Our own grant from a pass that crashed is fine.
            return Refusal(reason=records.HandReason.CONFIG_MAP_EXISTS)
    except (errors.ApiUnavailable, errors.ApiTimeout) as e:
        return _refused(records.HandReason.CONFIG_MAP_UNAVAILABLE, kind="ConfigMap", body=config_map, e=e)
    except errors.ApiRefused as e:
        return _refused(records.HandReason.CONFIG_MAP_REFUSED, kind="ConfigMap", body=config_map, e=e)
    if swarm.worker.terminal_port is None:
        return None
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": labels.terminal_name(execution=attempt.execution, generation=attempt.generation),
            "namespace": attempt.namespace,
            "labels": attempt.labels,
            "ownerReferences": owner,
        },
        "spec": {
            "selector": attempt.labels,
            "ports": [{"name": "terminal", "port": swarm.worker.terminal_port, "targetPort": "terminal"}],
        },
    }
    try:
        await services.create(namespace=attempt.namespace, body=service)
    except errors.AlreadyExists:
        existing = await _read_quietly(
            services.read, namespace=attempt.namespace, name=service["metadata"]["name"]
        )
        if not _owned_by(existing, pod=pod):
            return Refusal(reason=records.HandReason.TERMINAL_REFUSED)
    except errors.ApiError as e:
        return _refused(records.HandReason.TERMINAL_REFUSED, kind="Service", body=service, e=e)
    return None


def _result(
    *,
    attempt: model.Attempt,
    pod_uid: str,
    swarm: resources.SwarmSpec,
    refusal: Refusal | None = None,
    removed: bool | None = None,
) -> records.HandResult:
    """The hand result of a launch. ``terminal``: the template the launch made its objects from
    had a terminal port (the Service exists only then, whatever the Swarm says later)."""
    return records.HandResult(
        generation=attempt.generation,
        handed=refusal is None,
        reason=refusal.reason if refusal is not None else None,
        removed=removed,
        pod=attempt.pod_name,
        pod_uid=pod_uid,
        terminal=swarm.worker.terminal_port is not None,
    )


async def _read_quietly(read: Any, **kwargs: Any) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] | None = await read(**kwargs)
    except errors.ApiError:
        return None
    return found


@dataclasses.dataclass(frozen=True, kw_only=True)
class Removal:
    """What launch removal did: ``removed`` is the hand result's field; ``why`` says why (for logs)."""

    removed: bool
    why: str
    capture: records.StartupCapture | None = None
    #: A ``StartupRefused`` Event was posted (its capture is stored).
    announced: bool = False


def describe(capture: records.StartupCapture) -> str:
    """One line for an Event: the failure class, then the worst container or the Pod's reason."""
    prefix = f"class {capture.failure_class or records.FailureClass.UNKNOWN}: "
    worst = next((c for c in capture.containers if c.terminated.get("exitCode") != 0), None)
    if worst is None:
        return prefix + diagnostics.summary(capture)
    line = diagnostics.last_line(capture)
    return prefix + (
        f"container {worst.name} exited {worst.terminated.get('exitCode')} "
        f"({worst.terminated.get('reason') or 'no reason'})" + (f": {line}" if line else "")
    )


async def remove_at_launch(
    *,
    runtime: model.Runtime,
    attempt: model.Attempt,
    uid: str,
    notify: events.Events,
    guard: model.Guard | None = None,
    refused: str | None = None,
) -> Removal:
    """The spec's launch removal, once. Any failed step keeps the Pod (``removed: false``).

    ``guard`` is checked before the Redis write and before the delete: a replica that lost the
    lease raises ``NotLeader`` there and leaves both to the leader.

    ``refused`` is why the hand was refused (:meth:`Refusal.describe`). One Event tells it: the
    ``StartupRefused`` of a stored capture, which names the refusal too, else ``HandRefused``;
    an Event costs the API server more than the capture's own reads, so there is one, not two.
    """
    guard = guard or model.Unguarded()
    removal = await _remove_at_launch(
        runtime=runtime, attempt=attempt, uid=uid, notify=notify, guard=guard, refused=refused
    )
    runtime.metrics.pods_removed.labels(path="launch", outcome="removed" if removal.removed else "kept").inc()
    if refused is not None and not removal.announced:
        notify.warning(
            reason="HandRefused", message=f"The hand to {attempt.pod_name} was refused: {refused}."
        )
    if not removal.removed:
        logger.warning(
            "Launch removal kept pod %s/%s (removed: false): %s. Final cleanup will retry.",
            attempt.namespace,
            attempt.pod_name,
            removal.why,
        )
        notify.warning(
            reason="LaunchRemovalKept",
            message=f"Kept pod {attempt.pod_name}: {removal.why}. Final cleanup will retry.",
        )
    return removal


async def _remove_at_launch(
    *,
    runtime: model.Runtime,
    attempt: model.Attempt,
    uid: str,
    notify: events.Events,
    guard: model.Guard,
    refused: str | None,
    capture_terminating: bool = False,
) -> Removal:
    """Read, judge and delete the Pod as it was read (:func:`.removal.remove`): a Pod that failed
    after a read that saw it starting is read, judged and captured again instead of being deleted
    unseen. A capture stored by an earlier try stays the removal's capture."""
    evidence = _Evidence(runtime=runtime, attempt=attempt, notify=notify, guard=guard, refused=refused)
    judged = await removal_.remove(
        objects=runtime.cluster.pods,
        target=removal_.Target(
            kind="pod", namespace=attempt.namespace, name=attempt.pod_name, uid=uid, labels=attempt.labels
        ),
        evidence=evidence,
        guard=guard,
        confirm_gone=False,
        capture_terminating=capture_terminating,
    )
    if judged.kept is not None:
        return judged.kept
    stored = evidence.stored
    return Removal(
        removed=judged.outcome in ("absent", "deleted", "gone"),
        why=_why(judged, uid=uid),
        capture=stored,
        announced=stored is not None,
    )


def _why(judged: removal_.Judged[Removal], *, uid: str) -> str:
    """Why launch removal removed or kept the Pod, in the words of its log line and Event."""
    if judged.outcome == "failed":
        return {
            "read": f"the pod could not be re-read: {judged.error}",
            "list": f"the delete answered 404 and the list failed: {judged.error}",
            "delete": f"the delete failed: {judged.error}",
            "release": f"it was deleted, but its evidence finalizer could not be released: {judged.error}",
        }[judged.step or "read"]
    if judged.outcome == "replaced":
        return f"its UID changed from {uid} to {((judged.found or {}).get('metadata') or {}).get('uid')}"
    return {
        "absent": "the pod was already gone",
        "unselected": "its owner, execution or generation labels no longer match",
        "terminating": "it is already being deleted",
        "deleted": "deleted",
        "gone": "the pod was gone before the delete",
        "listed": "the delete answered 404 but the pod is still listed",
        "changed": "it changed each time it was about to be deleted",
    }[judged.outcome]


@dataclasses.dataclass(kw_only=True)
class _Evidence:
    """Launch removal's evidence: the capture of a refused Pod, stored with ``HSETNX`` once."""

    runtime: model.Runtime
    attempt: model.Attempt
    notify: events.Events
    guard: model.Guard
    refused: str | None
    #: The capture this removal stored (by an earlier try, when the Pod changed since).
    stored: records.StartupCapture | None = None

    async def keep(self, found: dict[str, Any], *, terminating: bool) -> Removal | None:
        """Capture the Pod and store a refusal's capture; a Removal (kept) when either failed."""
        if self.stored is not None:
            return None
        runtime = self.runtime
        try:
            capture = await runtime.startup(found, runtime.reader)
        except (errors.ApiError, ConnectionError, TimeoutError) as e:
            runtime.metrics.log_read_failures.labels(path="launch", cause=causes.of(e).name).inc()
            runtime.metrics.captures.labels(path="launch", result="kept").inc()
            return Removal(removed=False, why=f"its log could not be read: {e}")
        if capture is None:
            return None
        kept = await _store(
            runtime=runtime,
            attempt=self.attempt,
            pod=found,
            capture=capture,
            notify=self.notify,
            guard=self.guard,
            refused=self.refused,
        )
        if kept is None:
            self.stored = capture
        return kept

    def judging_again(self) -> None:
        return None  # What a try stored stays stored: the next try does not capture again.


async def _store(
    *,
    runtime: model.Runtime,
    attempt: model.Attempt,
    pod: dict[str, Any],
    capture: records.StartupCapture,
    notify: events.Events,
    guard: model.Guard,
    refused: str | None,
) -> Removal | None:
    """Store a refused Pod's capture (``HSETNX``); None when it is stored, else why the Pod stays."""
    if runtime.recorder is None:
        runtime.metrics.captures.labels(path="launch", result="kept").inc()
        return Removal(removed=False, why="it was refused and there is no recorder", capture=capture)
    metadata = pod.get("metadata") or {}
    uid = str(metadata.get("uid"))
    record = records.StartupRecord(
        pod=attempt.pod_name,
        uid=uid,
        labels={k: v for k, v in (metadata.get("labels") or {}).items() if k in attempt.labels},
        startup=capture,
    )
    guard.check(before="storing the launch capture")
    try:
        stored = await runtime.recorder.record_startup(
            slug=attempt.slug, execution=attempt.execution, record=record, life=attempt.owner_uid
        )
    except errors.StoreUnavailable as e:
        runtime.metrics.captures.labels(path="launch", result="kept").inc()
        runtime.metrics.store_failures.labels(path="launch").inc()
        return Removal(removed=False, why=f"its capture could not be stored: {e}", capture=capture)
    if stored.uid != uid:
        # The first capture of an execution wins (HSETNX), and it is another Pod's (an earlier
        # launch of this execution): this Pod's evidence is not stored, so it stays for final
        # cleanup, which keeps its capture in the journal and then in attempt-retained.
        runtime.metrics.captures.labels(path="launch", result="kept").inc()
        return Removal(
            removed=False,
            why=f"the launch record holds the first capture, pod uid {stored.uid}'s; final cleanup "
            "captures this pod",
            capture=capture,
        )
    runtime.metrics.captures.labels(path="launch", result="stored").inc()
    metrics.count_capture(runtime.metrics, path="launch", capture=capture)
    hand = f" (the hand was refused: {refused})" if refused is not None else ""
    notify.warning(
        reason="StartupRefused", message=f"Worker pod {attempt.pod_name}{hand}: {describe(capture)}"
    )
    return None


async def launch(
    *,
    runtime: model.Runtime,
    attempt: model.Attempt,
    swarm: resources.SwarmSpec,
    execution: resources.ExecutionSpec,
    notify: events.Events,
    guard: model.Guard | None = None,
    credential: str | None = None,
) -> Launched:
    """Create or adopt the worker Pod, hand it its grant, and remove it if the hand is refused.
    ``credential`` is the swarm's Redis credential Secret the Pod mounts (None: none)."""
    try:
        pod = await ensure_pod(
            pods=runtime.cluster.pods,
            attempt=attempt,
            worker=swarm.worker,
            startup_deadline_seconds=runtime.startup_deadline_seconds,
            credential=credential,
            workers=runtime.workers,
            # The hand gives the Pod its grant only for a project the Swarm registers.
            confirm=execution.project in swarm.registration.projects,
        )
    except OwnPodTerminating as e:
        # Its evidence finalizer holds it: capture it (a refusal's capture is stored, as launch
        # removal stores one) and release it; the next pass launches the attempt anew.
        removal = await _remove_at_launch(
            runtime=runtime,
            attempt=attempt,
            uid=str(e.pod["metadata"]["uid"]),
            notify=notify,
            guard=guard or model.Unguarded(),
            refused=None,
            capture_terminating=True,
        )
        raise errors.ApiUnavailable(
            f"{e} before its launch was recorded; {'its capture is stored and ' if removal.capture else ''}"
            f"it is released ({removal.why}); the launch is tried again"
        ) from e
    refusal = await hand(
        config_maps=runtime.cluster.config_maps,
        services=runtime.cluster.services,
        attempt=attempt,
        pod=pod,
        swarm=swarm,
        project=execution.project,
        task=execution.task,
    )
    pod_uid = str(pod["metadata"]["uid"])
    runtime.metrics.hands.labels(reason=refusal.reason if refusal else "handed").inc()
    if refusal is None:
        notify.normal(reason="Handed", message=f"Worker pod {attempt.pod_name} has its grant.")
        return Launched(hand=_result(attempt=attempt, pod_uid=pod_uid, swarm=swarm), pod=pod)
    removal = await remove_at_launch(
        runtime=runtime,
        attempt=attempt,
        uid=pod_uid,
        notify=notify,
        guard=guard,
        refused=refusal.describe(),
    )
    return Launched(
        hand=_result(attempt=attempt, pod_uid=pod_uid, swarm=swarm, refusal=refusal, removed=removal.removed),
        detail=refusal.detail,
    )
