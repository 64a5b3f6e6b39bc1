"""PodClient: every Kubernetes API call the operator makes, on kubernetes-asyncio.

Requests go through the generic ``ApiClient.call_api`` with ``_preload_content=False`` so that:

* objects come back as the raw JSON the API server sent (a terminated state keeps every field,
  camelCase, including ones newer than this client's models);
* every failure is sorted by status into the package's error tree here, once
  (:mod:`agentihooks_swarm.errors`), instead of leaking ``ApiException`` upwards.

The log limits are fixed by the spec and have no setting.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import datetime
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Final

import aiohttp
from kubernetes_asyncio import client as k8s

from agentihooks_swarm import errors
from agentihooks_swarm.kubernetes import labels, logs

logger = logging.getLogger(__name__)

#: The log read: the container's last 200 lines, at most 64 KiB, with timestamps.
LOG_TAIL_LINES: Final = 200
LOG_LIMIT_BYTES: Final = 64 * 1024
#: Events listed per Pod for a capture (the capture keeps the newest 20 of them).
EVENTS_LIST_LIMIT: Final = 500
#: The Events of Pods: what ``event_index`` lists and watches.
POD_EVENTS_SELECTOR: Final = "involvedObject.kind=Pod"
#: How much of a log stream we are willing to read past the byte limit to find its newest lines.
LOG_STREAM_MAX_BYTES: Final = 64 * 1024 * 1024

Object = dict[str, Any]


LogRead = logs.LogRead


def _status_error(*, status: int, body: bytes, what: str) -> errors.ApiError:
    reason = ""
    message = body.decode("utf-8", errors="replace")
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        reason = str(payload.get("reason") or "")
        message = str(payload.get("message") or message)
    text = f"{what}: {status} {reason}: {errors.trim(message)}".replace(":  ", ": ")
    sorted_by: type[errors.ApiError] = errors.ApiRefused
    if status == 429 or status >= 500:
        sorted_by = errors.ApiUnavailable
    elif status == 404:
        sorted_by = errors.NotFound
    elif status == 409 and reason == "AlreadyExists":
        sorted_by = errors.AlreadyExists
    elif status == 409:
        sorted_by = errors.PreconditionFailed
    return sorted_by(text, status=status, reason=reason, detail=errors.trim(message, limit=errors.MAX_QUOTE))


@contextlib.contextmanager
def _reading(what: str, *, stalled: str = "the answer did not arrive in time") -> Iterator[None]:
    """Sort a failure while an answer's body is read: a timeout, or a broken connection."""
    try:
        yield
    except errors.ApiError:
        raise
    except TimeoutError as e:
        raise errors.ApiTimeout(f"{what}: {stalled}") from e
    except (aiohttp.ClientError, OSError) as e:
        raise errors.ApiUnavailable(f"{what}: {type(e).__name__}: {errors.trim(str(e))}") from e


#: The longest a ``429 Too Many Requests`` holds back the client's next requests, whatever its
#: ``Retry-After`` says (a Lease renewal waits too), and the hold when it says nothing.
HOLD_CAP_SECONDS: Final = 5.0
HOLD_DEFAULT_SECONDS: Final = 1.0


def retry_after(headers: Mapping[str, str]) -> float:
    """The seconds a 429 asks the client to wait (``Retry-After``, in seconds), within the cap."""
    try:
        asked = float(headers.get("Retry-After") or HOLD_DEFAULT_SECONDS)
    except ValueError:
        asked = HOLD_DEFAULT_SECONDS
    return min(max(asked, 0.0), HOLD_CAP_SECONDS)


class PodClient:
    """The operator's Kubernetes API calls for one namespace's workers (and their swarm objects).

    A ``429 Too Many Requests`` holds back every later request of this client for the seconds its
    ``Retry-After`` asks (as client-go does): the API server sheds load, and the 32 steps at once
    would otherwise each fail fast and try the next Execution, sending hundreds of requests a
    second into the overload. The request that was answered 429 still fails (ApiUnavailable).
    """

    def __init__(
        self, *, api: k8s.ApiClient, timeout: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._api = api
        self._timeout = timeout
        self._clock = clock
        #: No request is sent before this time (a 429's Retry-After).
        self._held_until = 0.0

    async def _hold(self) -> None:
        wait = self._held_until - self._clock()
        if wait > 0:
            await asyncio.sleep(wait)

    async def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: builtins.list[tuple[str, str]] | None = None,
        body: Object | builtins.list[Object] | None = None,
        timeout_seconds: float | None = None,
        content_type: str = "application/json",
    ) -> aiohttp.ClientResponse:
        """Send one request; return the (unread) response, or raise a sorted error."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        await self._hold()
        try:
            response: aiohttp.ClientResponse = await self._api.call_api(
                path,
                method,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout_seconds or self._timeout,
            )
        except TimeoutError as e:
            raise errors.ApiTimeout(f"{what}: no answer within {timeout_seconds or self._timeout}s") from e
        except (aiohttp.ClientError, OSError) as e:
            raise errors.ApiUnavailable(f"{what}: {type(e).__name__}: {errors.trim(str(e))}") from e
        if not 200 <= response.status <= 299:
            if response.status == 429:
                self._held_until = max(self._held_until, self._clock() + retry_after(response.headers))
            try:
                payload = await response.read()
            except (aiohttp.ClientError, TimeoutError, OSError):
                payload = b""
            finally:
                response.release()
            raise _status_error(status=response.status, body=payload, what=what)
        return response

    async def _json(self, method: str, path: str, *, what: str, **kwargs: Any) -> Object:
        response = await self._request(method, path, what=what, **kwargs)
        try:
            with _reading(what):
                raw = await response.read()
        finally:
            response.release()
        result: Object = json.loads(raw)
        return result

    # --- Pods -----------------------------------------------------------------------------------

    async def read(self, *, namespace: str, name: str) -> Object | None:
        """The Pod as the API server has it now, or None if there is none."""
        try:
            return await self._json(
                "GET", f"/api/v1/namespaces/{namespace}/pods/{name}", what=f"read pod {namespace}/{name}"
            )
        except errors.NotFound:
            return None

    async def list(self, *, namespace: str, selector: str) -> builtins.list[Object]:
        """Pods by label selector."""
        return await self._list("pods", namespace=namespace, selector=selector, name=None)

    async def still_listed(self, *, plural: str, namespace: str, name: str, uid: str) -> bool:
        """Whether a list by name still shows this UID: the second opinion on a 404 or a 409."""
        items = await self._list(plural, namespace=namespace, selector=None, name=name)
        return any((item.get("metadata") or {}).get("uid") == uid for item in items)

    async def _list(
        self, plural: str, *, namespace: str, selector: str | None, name: str | None
    ) -> builtins.list[Object]:
        query = []
        if selector is not None:
            query.append(("labelSelector", selector))
        if name is not None:
            query.append(("fieldSelector", f"metadata.name={name}"))
        found = await self._json(
            "GET",
            f"/api/v1/namespaces/{namespace}/{plural}",
            query=query,
            what=f"list {plural} {namespace} {selector or ''}{name or ''}",
        )
        items: builtins.list[Object] = found.get("items") or []
        return items

    async def create(self, *, namespace: str, body: Object) -> Object:
        return await self._json(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            body=body,
            what=f"create pod {namespace}/{body['metadata']['name']}",
        )

    async def delete(
        self, *, namespace: str, name: str, uid: str, resource_version: str | None = None
    ) -> None:
        """Delete the Pod only if it still has this UID and (given) this resourceVersion: the Pod
        as it was read, not one that changed since (409 → PreconditionFailed, 404 → NotFound)."""
        await self._delete("pods", namespace=namespace, name=name, uid=uid, resource_version=resource_version)

    async def pod_logs(self, *, namespace: str, name: str, container: str) -> LogRead:
        """The container's last 200 lines, at most 64 KiB, with timestamps, newest lines kept.

        One request in the common case. When the answer fills the byte limit, the API server has
        kept the *oldest* part of the tail, so a second, streamed request reads the same tail and
        keeps only its newest 64 KiB (memory stays at the limit, however long the lines are).
        429/5xx raise ConnectionError, other refusals ApiRefused, timeouts TimeoutError.

        The second read may stream up to 64 MiB within one request timeout, and may fail where the
        first did not: then the first read's 64 KiB is the answer (``truncated``), not a failed
        read. That log was read, and counting it as lost would remove the Pod without it after
        three tries.
        """
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
        base = [("container", container), ("tailLines", str(LOG_TAIL_LINES)), ("timestamps", "true")]
        what = f"read log of {namespace}/{name}/{container}"
        first = await self._request(
            "GET", path, what=what, query=[*base, ("limitBytes", str(LOG_LIMIT_BYTES))]
        )
        head = await self._read_all(first, what=what, cap=LOG_LIMIT_BYTES + 1)
        if len(head) < LOG_LIMIT_BYTES:
            return logs.fit(head, limit=LOG_LIMIT_BYTES)
        try:
            return await self._newest_end(path, query=base, what=what)
        except errors.ApiError as e:
            logger.warning("Keeping the first %d bytes of the log tail: %s", len(head), e)
            return logs.fit(head, limit=LOG_LIMIT_BYTES, truncated=True)

    async def _newest_end(self, path: str, *, query: builtins.list[tuple[str, str]], what: str) -> LogRead:
        """The log tail streamed without a byte limit, its newest 64 KiB kept."""
        stream = await self._request("GET", path, what=f"{what} (newest end)", query=query)
        window = logs.Window(limit=LOG_LIMIT_BYTES)
        seen = 0
        try:
            with _reading(what, stalled="the log stream did not finish in time"):
                async for chunk in stream.content.iter_chunked(64 * 1024):
                    window.feed(chunk)
                    seen += len(chunk)
                    if seen > LOG_STREAM_MAX_BYTES:
                        break
        finally:
            stream.release()
        return logs.fit(
            window.tail(),
            limit=LOG_LIMIT_BYTES,
            partial_first_line=not window.starts_at_line,
            truncated=window.dropped > 0 or seen > LOG_STREAM_MAX_BYTES,
        )

    async def pod_events(self, *, namespace: str, uid: str) -> builtins.list[Object]:
        """The Pod's own Events: those whose ``involvedObject.uid`` is the Pod's UID (any order).

        Selected by UID, not name, so a Pod recreated under the same name never lends its Events.
        Failures are sorted like every request's; the capture degrades on them (no ``events``).
        """
        found = await self._json(
            "GET",
            f"/api/v1/namespaces/{namespace}/events",
            query=[("fieldSelector", f"involvedObject.uid={uid}"), ("limit", str(EVENTS_LIST_LIMIT))],
            what=f"list events of pod uid={uid} in {namespace}",
        )
        items: builtins.list[Object] = found.get("items") or []
        return items

    def pod_events_listing(self, *, namespace: str | None) -> Listing:
        """Every Pod's Events (``POD_EVENTS_SELECTOR``), in one namespace or all, for an informer."""
        return Listing(
            client=self,
            path=self._core_path(namespace, "events"),
            field_selector=POD_EVENTS_SELECTOR,
            what=f"pod events {namespace or 'everywhere'}",
        )

    def worker_pods_listing(self, *, namespace: str | None) -> Listing:
        """Every worker Pod (it carries the execution label), in one namespace or all."""
        return Listing(
            client=self,
            path=self._core_path(namespace, "pods"),
            field_selector="",
            label_selector=labels.EXECUTION,
            what=f"worker pods {namespace or 'everywhere'}",
        )

    def custom_listing(self, *, namespace: str | None, plural: str) -> Listing:
        """Every custom object of a kind, in one namespace or all, for an informer."""
        return Listing(
            client=self,
            path=self._custom_path(namespace=namespace, plural=plural),
            field_selector="",
            what=f"{plural} {namespace or 'everywhere'}",
        )

    @staticmethod
    def _core_path(namespace: str | None, plural: str) -> str:
        return f"/api/v1/namespaces/{namespace}/{plural}" if namespace else f"/api/v1/{plural}"

    @contextlib.asynccontextmanager
    async def _watching(
        self,
        path: str,
        *,
        field_selector: str,
        version: str,
        seconds: int,
        what: str,
        label_selector: str = "",
    ) -> AsyncIterator[AsyncIterator[Object]]:
        query = [
            ("watch", "1"),
            ("fieldSelector", field_selector),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(seconds)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        response = await self._request(
            "GET",
            path,
            query=query,
            timeout_seconds=seconds + self._timeout,
            what=what,
        )
        try:
            yield self._watch_events(response, what=what)
        finally:
            response.release()

    @staticmethod
    async def _watch_events(response: aiohttp.ClientResponse, *, what: str) -> AsyncIterator[Object]:
        with _reading(what, stalled="the stream stalled"):
            async for line in response.content:
                if line.strip():
                    event: Object = json.loads(line)
                    yield event

    async def set_active_deadline(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        seconds: int,
        notes: dict[str, str] | None = None,
        has_annotations: bool = True,
    ) -> Object:
        """Set the Pod's ``spec.activeDeadlineSeconds`` (the kubelet fails it once that has passed),
        and the annotations ``notes`` in the same patch (``has_annotations``: whether the Pod has
        an annotations map to add them to; without one the map is created with them).

        A JSON patch whose first operation tests the UID: a replaced Pod answers 422 (ApiRefused),
        never gets the deadline. The field may be added to a running Pod, or lowered.
        """
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        patch: Any = [
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "add", "path": "/spec/activeDeadlineSeconds", "value": seconds},
        ]
        if notes and not has_annotations:
            patch.append({"op": "add", "path": "/metadata/annotations", "value": dict(notes)})
        else:
            for key, value in (notes or {}).items():
                escaped = key.replace("~", "~0").replace("/", "~1")
                patch.append({"op": "add", "path": f"/metadata/annotations/{escaped}", "value": value})
        return await self._json(
            "PATCH",
            path,
            body=patch,
            what=f"set activeDeadlineSeconds of pod {namespace}/{name} uid={uid}",
            content_type="application/json-patch+json",
        )

    @staticmethod
    async def _read_all(response: aiohttp.ClientResponse, *, what: str, cap: int) -> bytes:
        data = bytearray()
        try:
            with _reading(what):
                while len(data) < cap:
                    chunk = await response.content.read(cap - len(data))
                    if not chunk:
                        break
                    data += chunk
            return bytes(data)
        finally:
            response.release()

    # --- the hand's objects ---------------------------------------------------------------------

    async def create_config_map(self, *, namespace: str, body: Object) -> Object:
        return await self._json(
            "POST",
            f"/api/v1/namespaces/{namespace}/configmaps",
            body=body,
            what=f"create configmap {namespace}/{body['metadata']['name']}",
        )

    async def read_config_map(self, *, namespace: str, name: str) -> Object | None:
        try:
            return await self._json(
                "GET",
                f"/api/v1/namespaces/{namespace}/configmaps/{name}",
                what=f"read configmap {namespace}/{name}",
            )
        except errors.NotFound:
            return None

    async def create_service(self, *, namespace: str, body: Object) -> Object:
        return await self._json(
            "POST",
            f"/api/v1/namespaces/{namespace}/services",
            body=body,
            what=f"create service {namespace}/{body['metadata']['name']}",
        )

    async def read_service(self, *, namespace: str, name: str) -> Object | None:
        try:
            return await self._json(
                "GET",
                f"/api/v1/namespaces/{namespace}/services/{name}",
                what=f"read service {namespace}/{name}",
            )
        except errors.NotFound:
            return None

    async def list_services(self, *, namespace: str, selector: str) -> builtins.list[Object]:
        return await self._list("services", namespace=namespace, selector=selector, name=None)

    async def delete_service(
        self, *, namespace: str, name: str, uid: str, resource_version: str | None = None
    ) -> None:
        await self._delete(
            "services", namespace=namespace, name=name, uid=uid, resource_version=resource_version
        )

    async def _delete(
        self, plural: str, *, namespace: str, name: str, uid: str, resource_version: str | None
    ) -> None:
        preconditions = (
            {"uid": uid} if resource_version is None else {"uid": uid, "resourceVersion": resource_version}
        )
        body: Object = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": preconditions,
            "propagationPolicy": "Background",
        }
        response = await self._request(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/{plural}/{name}",
            body=body,
            what=f"delete {plural[:-1]} {namespace}/{name} uid={uid}",
        )
        response.release()

    # --- leases (leadership) --------------------------------------------------------------------

    async def read_lease(self, *, namespace: str, name: str) -> Object | None:
        try:
            return await self._json(
                "GET",
                f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
                what=f"read lease {namespace}/{name}",
            )
        except errors.NotFound:
            return None

    async def create_lease(self, *, namespace: str, body: Object) -> Object:
        return await self._json(
            "POST",
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
            body=body,
            what=f"create lease {namespace}/{body['metadata']['name']}",
        )

    async def replace_lease(self, *, namespace: str, body: Object) -> Object:
        """PUT with the body's resourceVersion: a concurrent change answers 409 (PreconditionFailed)."""
        name = body["metadata"]["name"]
        return await self._json(
            "PUT",
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
            body=body,
            what=f"replace lease {namespace}/{name}",
        )

    # --- swarm objects --------------------------------------------------------------------------

    async def read_custom(self, *, namespace: str, plural: str, name: str) -> Object | None:
        try:
            return await self._json(
                "GET",
                f"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{namespace}/{plural}/{name}",
                what=f"read {plural} {namespace}/{name}",
            )
        except errors.NotFound:
            return None

    async def annotate_custom(
        self, *, namespace: str, plural: str, name: str, annotations: dict[str, str]
    ) -> Object:
        """Set annotations on a custom object (a JSON merge patch of ``metadata.annotations``)."""
        return await self._json(
            "PATCH",
            f"/apis/swarm.agentihooks.io/v1alpha1/namespaces/{namespace}/{plural}/{name}",
            body={"metadata": {"annotations": annotations}},
            content_type="application/merge-patch+json",
            what=f"annotate {plural} {namespace}/{name}",
        )

    def _custom_path(self, *, namespace: str | None, plural: str, name: str | None = None) -> str:
        scope = f"/namespaces/{namespace}" if namespace else ""
        return f"/apis/swarm.agentihooks.io/v1alpha1{scope}/{plural}" + (f"/{name}" if name else "")

    async def _page(
        self, path: str, *, field_selector: str, limit: int, cont: str, what: str, label_selector: str = ""
    ) -> Object:
        """One page of a list (``items``, and ``metadata.continue`` / ``resourceVersion``)."""
        query = [("fieldSelector", field_selector), ("limit", str(limit))]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if cont:
            query.append(("continue", cont))
        return await self._json("GET", path, query=query, what=what)

    async def _pages(
        self, path: str, *, field_selector: str, limit: int, what: str, label_selector: str = ""
    ) -> AsyncIterator[Object]:
        """Every page of a list, in order (each with ``items`` and ``metadata``); one page is held at
        a time: the caller's, until it asks for the next."""
        cont = ""
        while True:
            page = await self._page(
                path,
                field_selector=field_selector,
                label_selector=label_selector,
                limit=limit,
                cont=cont,
                what=what,
            )
            cont = str((page.get("metadata") or {}).get("continue") or "")
            yield page
            del page
            if not cont:
                return

    def list_custom_pages(
        self, *, namespace: str | None, plural: str, field_selector: str, limit: int
    ) -> AsyncIterator[Object]:
        """Every page of a list of custom objects (see :meth:`_pages`)."""
        return self._pages(
            self._custom_path(namespace=namespace, plural=plural),
            field_selector=field_selector,
            limit=limit,
            what=f"list {plural} {namespace or 'everywhere'} {field_selector}",
        )

    async def patch_custom(self, *, namespace: str, plural: str, name: str, body: Object) -> Object:
        """A JSON merge patch of the object (metadata and spec; not its status)."""
        return await self._json(
            "PATCH",
            self._custom_path(namespace=namespace, plural=plural, name=name),
            body=body,
            content_type="application/merge-patch+json",
            what=f"patch {plural} {namespace}/{name}",
        )

    async def patch_custom_status(
        self, *, namespace: str, plural: str, name: str, uid: str, status: Object
    ) -> Object:
        """A JSON merge patch of the object's status subresource, only if the object still has this
        UID (another object under the name answers 409: PreconditionFailed); the object as it is
        after it."""
        return await self._json(
            "PATCH",
            self._custom_path(namespace=namespace, plural=plural, name=name) + "/status",
            body={"metadata": {"uid": uid}, "status": status},
            content_type="application/merge-patch+json",
            what=f"patch the status of {plural} {namespace}/{name}",
        )

    async def delete_custom(self, *, namespace: str, plural: str, name: str, uid: str) -> None:
        """Delete the object only if it still has this UID (409 → PreconditionFailed, 404 → NotFound)."""
        body: Object = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        response = await self._request(
            "DELETE",
            self._custom_path(namespace=namespace, plural=plural, name=name),
            body=body,
            what=f"delete {plural[:-1]} {namespace}/{name} uid={uid}",
        )
        response.release()

    # --- events ---------------------------------------------------------------------------------

    async def post_event(
        self, *, involved: Object, type_: str, reason: str, message: str, component: str, instance: str
    ) -> None:
        """One core/v1 Event about ``involved`` (an object reference), from ``component`` (the
        operator) on ``instance`` (this replica); the message is cut to the API's 1 KiB."""
        namespace = str(involved.get("namespace") or "default")
        now = datetime.datetime.now(datetime.UTC)
        body: Object = {
            "metadata": {"namespace": namespace, "generateName": f"{involved.get('name') or 'event'}."},
            "type": type_,
            "reason": reason,
            "message": message if len(message) <= 1024 else message[:1021] + "...",
            "action": reason,
            "reportingComponent": component,
            "reportingInstance": instance[:128],
            "source": {"component": component},
            "involvedObject": involved,
            "firstTimestamp": now.isoformat(timespec="seconds").replace("+00:00", "Z"),
            "lastTimestamp": now.isoformat(timespec="seconds").replace("+00:00", "Z"),
            "eventTime": now.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "count": 1,
        }
        response = await self._request(
            "POST", f"/api/v1/namespaces/{namespace}/events", body=body, what=f"post event {reason}"
        )
        response.release()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Listing:
    """One kind of object at one path, listed page by page and watched (an informer's source)."""

    client: PodClient
    path: str
    field_selector: str
    what: str
    label_selector: str = ""

    def pages(self, *, limit: int) -> AsyncIterator[Object]:
        return self.client._pages(
            self.path,
            field_selector=self.field_selector,
            label_selector=self.label_selector,
            limit=limit,
            what=f"list {self.what}",
        )

    def watching(
        self, *, version: str, seconds: int
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Object]]:
        """Entering it sends the watch request (and raises if it is refused); iterating yields the
        watch events until the server ends the stream."""
        return self.client._watching(
            self.path,
            field_selector=self.field_selector,
            label_selector=self.label_selector,
            version=version,
            seconds=seconds,
            what=f"watch {self.what}",
        )
