"""Make Pods on the test control plane behave, through kwok's own mechanisms only.

Nothing here writes Pod status: the kwok Stages in ``tests/support/cluster/kwok/pods.yaml`` play every
Pod that lands on the fake Node (scheduled there by kube-scheduler), and kwok's kubelet-like
server answers ``GET pods/{name}/log`` from a file named by a kwok ``Logs`` object.

Annotation protocol
-------------------
The Stages read these annotations (prefix ``kwok.agentihooks.io/``) from the Pod, so they work
for Pods created by anyone, e.g. the operator creating a worker from a template that carries
them (``protocol_annotations(...)`` builds the dict):

``phase``
    ``Running`` (default; also without the annotation), ``Failed`` or ``Succeeded``. A Pod first
    goes Pending -> Running (containers running, Ready), and with ``Failed``/``Succeeded`` then
    to that phase with every main container terminated. ``restartPolicy`` is not consulted.
``exit-code``
    Exit code of every terminated main container; default 1 for ``Failed``, 0 for ``Succeeded``.
``reason``, ``message``
    ``state.terminated.reason`` / ``.message`` of the container that terminates with the exit
    code (main containers, or the failing init container). Reason defaults to ``Error`` for a
    nonzero code and ``Completed`` for 0; no message by default.
``init-exit-code``
    The Pod goes Pending -> Failed directly: the init container named by ``init-container``
    (default: the first one) terminates with this code, init containers before it completed
    with 0, later ones and all main containers stay ``waiting: PodInitializing`` (they never
    start). The Pod needs at least one init container (``worker_pod`` adds one).
``init-container``
    Name of the failing init container (see above).
``run-for``
    Go duration (``"2s"``, ``"500ms"``) the main containers run before ``phase`` applies;
    default 0. The terminated ``startedAt`` is the running ``startedAt``.
``pod-reason``, ``pod-message``
    ``status.reason`` / ``status.message`` of a Failed or Succeeded Pod (default: none).
``waiting-reason``, ``waiting-message``
    The main containers never start: the Pod stays ``Pending`` (scheduled, with a podIP) and
    every main container is ``waiting`` with this reason and message — what a kubelet reports
    for an image it cannot pull (``ErrImagePull``, ``ImagePullBackOff``), a missing Secret or
    ConfigMap (``CreateContainerConfigError``), a volume it cannot mount (``ContainerCreating``).
    The kubelet's Events that go with them are posted by the test (:func:`post_event`).

Whatever the annotations, a Pod that gets ``spec.activeDeadlineSeconds`` (Pending or Running) is
failed as its kubelet would once the deadline has passed: ``phase: Failed``, ``reason:
DeadlineExceeded``, running containers terminated with 137, waiting ones left waiting. kwok does
this at once (the operator sets the field only once the startup deadline has passed).

Terminated states carry ``exitCode``, ``reason``, ``message`` (when set), ``startedAt``,
``finishedAt`` and ``containerID`` (``kwok://<pod uid>-<container>``). Deleting a Pod works as
with a kubelet, except that its containers are not stopped (a running Pod stays ``Running``, as on
a node that no longer answers): kwok confirms the deletion (grace 0) once ``deletionTimestamp`` is
set and no finalizer holds the Pod. kwok deletes by name, where a kubelet names the UID; deleting
only then keeps its deletes from reaching the next Pod of the same name.

Planted logs
------------
``plant_log`` writes the content as a CRI log file (one ``<RFC3339Nano> stdout F <line>`` record
per line, which is what a kubelet reads) under the cluster's ``pod_logs_dir`` and points a kwok
``Logs`` object named after the Pod at it. kwok looks the ``Logs`` object up by namespace and
Pod name when a log is requested, so a log planted BEFORE the Pod exists is served once a Pod of
that name runs on the fake Node (and again for a Pod recreated under that name). A container
without a planted log answers an empty log (the cluster's fallback ``ClusterLogs``).

kwok's Logs cache: kwok v0.8.0 keyed its converted list of Logs objects on its informer's last
resourceVersion, which the informer sets when a watch event is queued, before the object is in its
store. A log request in between (any Pod's; kube-apiserver's, or a wait for a planted log) cached
the list without the new object under the new version, and kwok answered from it ("no logs" or
the fallback's empty log) until some other Logs object changed: forever in a quiet cluster. It
struck most often at the last objects of a burst (``plant_shared_log``) and at kwok's start (the
readiness log). kwok is built with that fixed (``tests/tools/binaries/_kwok/dynamic.go``);
``tests/integration/test_control_plane.py`` plants bursts while logs are read.

What ``GET pods/{name}/log?tailLines=200&limitBytes=65536&timestamps=true`` returns (measured by
``tests/integration/test_control_plane.py`` through the real kube-apiserver; kwok reads the file
with the kubelet's own CRI log reader, k8s.io/cri-client ``ReadLogs``):

* ``tailLines`` picks the last N lines of the file; ``timestamps`` prefixes each line with
  ``<RFC3339Nano, 9 digits> `` (those prefix bytes count against ``limitBytes``).
* ``limitBytes`` then keeps the FIRST bytes of that tail window: the output starts at the
  oldest of the N lines and stops after exactly ``limitBytes`` bytes, cutting the last line in
  the middle. When the tail is larger than the byte limit, the NEWEST lines are the ones lost.
* Bytes are returned raw: invalid UTF-8 comes back unchanged (no replacement) with
  ``Content-Type: text/plain``; decoding is the client's business.
* A last line without a newline comes back without one.

Where kwok differs from a kubelet: it serves a container's log whatever the container's state
(a kubelet answers 400 "waiting to start" for a container that never started, kwok answers the
planted or empty log); ``previous=true`` is refused (no previous log is planted); ``sinceTime``
and ``sinceSeconds`` filter on the planted timestamps (``plant_log(first_timestamp=...)``).

Where a real kubelet answers differently from kwok (seen on the real node, ``tests/realnode``):

* A main container behind a failed init container stays ``waiting: PodInitializing`` and its log
  answers **400** ``container "worker" in pod "…" is waiting to start: PodInitializing``. The
  operator only reads logs of terminated containers, so that container is left out of the
  capture and the init container's evidence is stored (``test_capture.py``).
* ``containerID`` is ``containerd://<64 hex>``; ``startedAt``/``finishedAt`` are whole seconds and
  often equal for a container that fails at once; the log's timestamps have 9 fractional digits.
* stdout and stderr are one stream in the log, interleaved in the order written.
* A memory limit kills with exit code 137, reason ``OOMKilled``; the log up to the kill is served.
* Invalid UTF-8 is served raw, as from kwok.
* A Pod failed by ``activeDeadlineSeconds`` (reason ``DeadlineExceeded``): a container that never
  started loses its ``waiting`` state (``ImagePullBackOff``, ``CreateContainerConfigError``) and is
  reported ``terminated`` with exit code 137, reason ``ContainerStatusUnknown``, no ``startedAt``;
  its log answers **400** ``… is terminated``. kwok leaves it waiting. The operator notes the
  waiting states on the Pod when it sets the deadline (``waiting_at_deadline`` in the capture)
  and treats that 400 for a container that never ran as "no log" (``log_error: not_started``).
* The log of a container whose exit is already reported can still be empty for a moment: in a
  clean-clone run a worker that printed its refusal and exited 78 was captured with ``log: ""``
  (containerd's CRI copies the output through a pipe to the log file and may finish writing after
  the exit is reported). kwok serves the planted file at once. The operator reads an empty log of
  a container that ended under 30 s ago again, 0.5 s and 2 s later (``log_rereads``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal, ParamSpec, TypedDict, TypeVar, Unpack, cast

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support.cluster import EMPTY_LOG, READINESS_LOG_PATH, ClusterError, ControlPlane

PREFIX: Final = "kwok.agentihooks.io/"
PHASE: Final = PREFIX + "phase"
EXIT_CODE: Final = PREFIX + "exit-code"
REASON: Final = PREFIX + "reason"
MESSAGE: Final = PREFIX + "message"
INIT_EXIT_CODE: Final = PREFIX + "init-exit-code"
INIT_CONTAINER: Final = PREFIX + "init-container"
RUN_FOR: Final = PREFIX + "run-for"
POD_REASON: Final = PREFIX + "pod-reason"
POD_MESSAGE: Final = PREFIX + "pod-message"
WAITING_REASON: Final = PREFIX + "waiting-reason"
WAITING_MESSAGE: Final = PREFIX + "waiting-message"

P = ParamSpec("P")
R = TypeVar("R")

WORKER_IMAGE: Final = "registry.invalid/agentihooks-swarm/worker:test"
Phase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]


class Behaviour(TypedDict, total=False):
    """How kwok plays a worker Pod, one protocol annotation a key (a key unset or None is left out)."""

    phase: Literal["Running", "Failed", "Succeeded"] | None
    exit_code: int | None
    reason: str | None
    message: str | None
    init_exit_code: int | None
    init_container: str | None
    run_for: str | None
    pod_reason: str | None
    pod_message: str | None
    waiting_reason: str | None
    waiting_message: str | None


#: Each key of :class:`Behaviour` and its annotation, in the order the annotations are written.
_ANNOTATIONS: Final[Mapping[str, str]] = {
    "phase": PHASE,
    "exit_code": EXIT_CODE,
    "reason": REASON,
    "message": MESSAGE,
    "init_exit_code": INIT_EXIT_CODE,
    "init_container": INIT_CONTAINER,
    "run_for": RUN_FOR,
    "pod_reason": POD_REASON,
    "pod_message": POD_MESSAGE,
    "waiting_reason": WAITING_REASON,
    "waiting_message": WAITING_MESSAGE,
}


def protocol_annotations(**behaviour: Unpack[Behaviour]) -> dict[str, str]:
    """The protocol annotations for the given behaviour (unset arguments are left out)."""
    given: Mapping[str, object] = behaviour
    return {
        annotation: str(given[key]) for key, annotation in _ANNOTATIONS.items() if given.get(key) is not None
    }


def _container(name: str, image: str) -> dict[str, Any]:
    # Passes Pod Security "restricted", so the Pod is admitted at every level.
    return {
        "name": name,
        "image": image,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


async def post_event(
    api: client.ApiClient,
    *,
    pod: Mapping[str, Any],
    type_: str,
    reason: str,
    message: str,
    count: int = 1,
    component: str = "kubelet",
) -> None:
    """Post an Event about ``pod`` through the API server, as its kubelet does (involvedObject by UID).

    On kwok no kubelet reports a failed pull or a missing Secret, so a test posts the Event that
    would; on a real node the kubelet posts it and the test posts nothing.
    """
    metadata = pod["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{metadata['name']}.", "namespace": metadata["namespace"]},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata["uid"],
        },
        "type": type_,
        "reason": reason,
        "message": message,
        "count": count,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": component},
        "reportingComponent": component,
    }
    await client.CoreV1Api(api).create_namespaced_event(metadata["namespace"], cast(Any, body))


def worker_pod(
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    containers: Sequence[str] = ("worker",),
    init_containers: Sequence[str] | None = None,
    image: str = WORKER_IMAGE,
    owner_references: Sequence[Mapping[str, Any]] | None = None,
    finalizers: Sequence[str] = (),
    **behaviour: Unpack[Behaviour],
) -> dict[str, Any]:
    """A Pod manifest (no ``nodeName``: kube-scheduler places it) following the protocol above.

    With ``init_exit_code`` and no ``init_containers``, one init container ``init`` is added.
    """
    if init_containers is None:
        init_containers = ("init",) if behaviour.get("init_exit_code") is not None else ()
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels or {}),
        "annotations": {**dict(annotations or {}), **protocol_annotations(**behaviour)},
    }
    if owner_references:
        metadata["ownerReferences"] = [dict(ref) for ref in owner_references]
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 30,
        "containers": [_container(c, image) for c in containers],
    }
    if init_containers:
        spec["initContainers"] = [_container(c, image) for c in init_containers]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


# --------------------------------------------------------------------------------------------
# Logs


def cri_log(
    content: bytes, *, stream: Literal["stdout", "stderr"] = "stdout", first: datetime, step: timedelta
) -> bytes:
    """Render ``content`` as CRI log records, one per line, timestamps ``first + i * step``.

    A last line without a trailing newline becomes a partial (``P``) record, which the kubelet's
    reader returns without a newline, as the container printed it.
    """
    lines = content.split(b"\n")
    records: list[bytes] = []
    for index, line in enumerate(lines):
        last = index == len(lines) - 1
        if last and not line:
            break
        stamp = (first + index * step).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
        tag = b"P" if last else b"F"
        records.append(stamp.encode() + b" " + stream.encode() + b" " + tag + b" " + line + b"\n")
    return b"".join(records)


def _logs_path(cluster: ControlPlane, *, namespace: str, pod: str, container: str) -> Path:
    return cluster.pod_logs_dir / namespace / pod / f"{container}.log"


def plant_log_blocking(
    *,
    cluster: ControlPlane,
    namespace: str,
    pod: str,
    container: str,
    content: bytes,
    stream: Literal["stdout", "stderr"] = "stdout",
    first_timestamp: datetime | None = None,
    timeout: float = 30.0,
) -> Path:
    """Make ``GET pods/{pod}/log?container={container}`` answer ``content`` (raw bytes).

    Works before the Pod exists and for any Pod of that name; planting again replaces the log.
    Returns once kwok serves it. ``first_timestamp`` is the first line's timestamp (default:
    now); each further line is 1 ms later. :func:`plant_log` is the same, awaited.
    """
    path = _logs_path(cluster, namespace=namespace, pod=pod, container=container)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = cri_log(
        content,
        stream=stream,
        first=first_timestamp or datetime.now(UTC),
        step=timedelta(milliseconds=1),
    )
    # Write then rename: a concurrent reader sees the old file or the new one, never half.
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{container}.")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.replace(temporary, path)
    _ensure_logs_object(cluster, namespace=namespace, pod=pod)
    _wait_served(cluster, namespace=namespace, pod=pod, container=container, content=content, timeout=timeout)
    return path


def _awaited(blocking: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """``blocking`` for async code: the same call in a worker thread, so the loop runs on."""

    @functools.wraps(blocking)
    async def awaited(*args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(blocking, *args, **kwargs)

    return awaited


plant_log = _awaited(plant_log_blocking)


def _logs_objects(namespace: str, pod: str = "") -> str:
    """The path of ``namespace``'s kwok ``Logs`` objects, or of the one named ``pod``."""
    return f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{namespace}/logs" + (f"/{pod}" if pod else "")


def _ensure_logs_object(cluster: ControlPlane, *, namespace: str, pod: str) -> None:
    """Create or update the kwok ``Logs`` object ``namespace/pod`` for every planted file."""
    directory = cluster.pod_logs_dir / namespace / pod
    entries: list[dict[str, Any]] = [
        {"containers": [file.stem], "logsFile": str(file)} for file in sorted(directory.glob("*.log"))
    ]
    # Other containers of the Pod printed nothing (a Logs object shadows the ClusterLogs fallback).
    entries.append({"logsFile": str(cluster.pod_logs_dir / EMPTY_LOG)})
    collection = _logs_objects(namespace)
    for _ in range(10):
        status, data = cluster.request("GET", _logs_objects(namespace, pod))
        if status == 404:
            body = {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Logs",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": {"logs": entries},
            }
            status, data = cluster.request("POST", collection, body)
        elif status == 200:
            current = json.loads(data)
            if current.get("spec", {}).get("logs") == entries:
                return
            current["spec"] = {"logs": entries}
            status, data = cluster.request("PUT", _logs_objects(namespace, pod), current)
        if status in (200, 201):
            return
        if status != 409:
            raise ClusterError(
                f"kwok Logs {namespace}/{pod}: {status} {data[:1000].decode(errors='replace')}"
            )
    raise ClusterError(f"kwok Logs {namespace}/{pod}: kept conflicting")


def _wait_served(
    cluster: ControlPlane, *, namespace: str, pod: str, container: str, content: bytes, timeout: float
) -> None:
    """Poll kwok's own containerLogs endpoint until it serves ``content`` (its informer is async)."""
    deadline = time.monotonic() + timeout
    path = f"/containerLogs/{namespace}/{pod}/{container}"
    last: tuple[int, bytes] = (0, b"")
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            last = cluster.kwok_get(path)
            if last == (200, content):
                return
        time.sleep(0.05)
    raise ClusterError(
        f"kwok did not serve the planted log of {namespace}/{pod}/{container} in {timeout:.0f}s: {last!r}; "
        + _kwok_logs_diagnosis(cluster, namespace=namespace, pod=pod)
    )


def _kwok_logs_diagnosis(cluster: ControlPlane, *, namespace: str, pod: str) -> str:
    """What the API server holds for the Logs object, and whether kwok still serves its own
    readiness log (a kwok whose whole Logs cache went stale would not)."""
    try:
        status, data = cluster.request("GET", _logs_objects(namespace, pod))
        try:
            found = json.loads(data)
            shown = json.dumps(
                {"resourceVersion": found["metadata"]["resourceVersion"], "spec": found["spec"]}
            )
        except (ValueError, KeyError, TypeError):
            shown = data[:600].decode(errors="replace")
        held = f"the API server answers {status} for the Logs object: {shown}"
    except OSError as e:
        held = f"reading the Logs object failed: {e}"
    try:
        readiness = cluster.kwok_get(READINESS_LOG_PATH)
    except OSError as e:
        return f"{held}; kwok's readiness log read failed: {e}"
    return f"{held}; kwok's readiness log: {readiness!r}"


async def read_log(
    api: client.ApiClient,
    *,
    namespace: str,
    pod: str,
    container: str,
    tail_lines: int | None = 200,
    limit_bytes: int | None = 65536,
    timestamps: bool = True,
) -> bytes:
    """``GET pods/{pod}/log`` through kube-apiserver, the raw bytes (defaults: the operator's)."""
    core = client.CoreV1Api(api)
    options: dict[str, Any] = {"container": container, "timestamps": timestamps, "_preload_content": False}
    if tail_lines is not None:
        options["tail_lines"] = tail_lines
    if limit_bytes is not None:
        options["limit_bytes"] = limit_bytes
    # With _preload_content=False the answer is the aiohttp response, not the decoded str.
    response = cast(Any, await core.read_namespaced_pod_log(pod, namespace, **options))
    try:
        body: bytes = await response.read()
    finally:
        response.release()
    return body


# --------------------------------------------------------------------------------------------
# Waiting


async def wait_for_phase(
    api: client.ApiClient,
    *,
    namespace: str,
    name: str,
    phase: Phase,
    timeout: float = 30.0,
) -> Any:
    """Poll until Pod ``namespace/name`` has ``phase``; return the ``V1Pod``.

    Fails early when the Pod reaches a different terminal phase.
    """
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    last: str | None = None
    while True:
        pod = await core.read_namespaced_pod(name, namespace)
        last = pod.status.phase if pod.status else None
        if last == phase:
            return pod
        if last in ("Failed", "Succeeded"):
            raise AssertionError(f"Pod {namespace}/{name} reached {last}, not {phase}: {pod.status}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"Pod {namespace}/{name} is {last!r} after {timeout}s, not {phase}")
        await asyncio.sleep(0.05)


async def wait_for_absent(
    *,
    read: Callable[[], Awaitable[object]],
    what: str,
    timeout: float = 30.0,
) -> None:
    """Poll ``await read()`` until it raises a 404 ``ApiException`` (the object is gone)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await read()
        except ApiException as error:
            if error.status == 404:
                return
            raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} still exists after {timeout}s")
        await asyncio.sleep(0.05)


async def force_delete(api: client.ApiClient, *, namespace: str, name: str) -> None:
    """Delete Pod ``namespace/name`` at once, finalizers and all, as an admin who clears a node
    does (``kubectl delete --force`` then removing its finalizers): the Pod is gone on return, its
    evidence finalizer notwithstanding."""
    core = client.CoreV1Api(api)
    try:
        uid = (await core.read_namespaced_pod(name, namespace)).metadata.uid
    except ApiException as error:
        if error.status == 404:
            return
        raise
    with contextlib.suppress(ApiException):
        await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        # The UID in the patch: never another Pod that took the name meanwhile.
        await core.patch_namespaced_pod(name, namespace, {"metadata": {"uid": uid, "finalizers": None}})

    async def same() -> object:
        # Gone once the name is free or another Pod (an operator's own, made at once) holds it.
        found = await core.read_namespaced_pod(name, namespace)
        if found.metadata.uid != uid:
            raise ApiException(status=404, reason="replaced")
        return found

    await wait_for_absent(read=same, what=name)


async def pod_exists(api: client.ApiClient, *, namespace: str, name: str) -> bool:
    """Whether Pod ``namespace/name`` exists now (any other API error is raised)."""
    try:
        await client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def plant_shared_log_blocking(
    *,
    cluster: ControlPlane,
    namespace: str,
    pods: Sequence[str],
    container: str,
    content: bytes,
    parallelism: int = 8,
    timeout: float = 120.0,
    share: str = "shared",
) -> Path:
    """Make ``GET pods/{pod}/log?container={container}`` answer ``content`` for every one of ``pods``.

    The content is written once, to one file, and every Pod's ``Logs`` object points at it, so
    thousands of Pods cost one file and one small object each, created ``parallelism`` at a time
    (``plant_log`` writes a file per Pod and waits for each in turn). Works before the Pods exist,
    like ``plant_log``; the other containers of these Pods print nothing. Returns once kwok serves
    the content for every one of them. Pods planted with another ``share`` serve another file.
    :func:`plant_shared_log` is the same, awaited.
    """
    if not pods:
        raise ValueError("plant_shared_log needs at least one Pod name")
    path = cluster.pod_logs_dir / namespace / f".{share}-{container}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cri_log(content, first=datetime.now(UTC), step=timedelta(milliseconds=1)))
    # kwok finds a Logs object by the Pod's namespace and name only (ClusterLogs come from its
    # static config), so each Pod gets a small one; all of them name the same file.
    entries = [
        {"containers": [container], "logsFile": str(path)},
        {"logsFile": str(cluster.pod_logs_dir / EMPTY_LOG)},
    ]
    collection = _logs_objects(namespace)

    def create(pod: str) -> None:
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {"logs": entries},
        }
        for _ in range(10):
            status, data = cluster.request("POST", collection, body)
            if status in (200, 201):
                return
            if status != 429 and status < 500:
                raise ClusterError(
                    f"kwok Logs {namespace}/{pod}: {status} {data[:1000].decode(errors='replace')}"
                )
            time.sleep(0.2)
        raise ClusterError(f"kwok Logs {namespace}/{pod}: the API server kept refusing")

    def served(pod: str) -> None:
        remaining = max(deadline - time.monotonic(), 0.1)
        _wait_served(
            cluster, namespace=namespace, pod=pod, container=container, content=content, timeout=remaining
        )

    with ThreadPoolExecutor(max_workers=parallelism) as pool:
        list(pool.map(create, pods))
        deadline = time.monotonic() + timeout
        list(pool.map(served, pods))
    return path


plant_shared_log = _awaited(plant_shared_log_blocking)
