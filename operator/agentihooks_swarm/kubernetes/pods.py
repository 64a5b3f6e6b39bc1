"""PodClient: the worker Pods' API calls (read, list, create, delete by UID, their logs and Events,
their deadline) and the listings an informer follows of them and of their Events.

The log limits are fixed by the spec and have no setting.
"""

from __future__ import annotations

import builtins
import logging
from typing import Any, Final

from agentihooks_swarm import errors
from agentihooks_swarm.kubernetes import core, labels, logs, transport as transport_

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

Object = transport_.Object
LogRead = logs.LogRead


class PodClient(core.CoreClient):
    """The Pods of one namespace's workers: :class:`core.CoreClient`'s calls, and the Pods' own."""

    def __init__(self, *, transport: transport_.Transport) -> None:
        super().__init__(transport=transport, plural="pods")

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
        first = await self.transport.request(
            "GET", path, what=what, query=[*base, ("limitBytes", str(LOG_LIMIT_BYTES))]
        )
        head = await self.transport.read_all(first, what=what, cap=LOG_LIMIT_BYTES + 1)
        if len(head) < LOG_LIMIT_BYTES:
            return logs.fit(head, limit=LOG_LIMIT_BYTES)
        try:
            return await self._newest_end(path, query=base, what=what)
        except errors.ApiError as e:
            logger.warning("Keeping the first %d bytes of the log tail: %s", len(head), e)
            return logs.fit(head, limit=LOG_LIMIT_BYTES, truncated=True)

    async def _newest_end(self, path: str, *, query: builtins.list[tuple[str, str]], what: str) -> LogRead:
        """The log tail streamed without a byte limit, its newest 64 KiB kept."""
        stream = await self.transport.request("GET", path, what=f"{what} (newest end)", query=query)
        window = logs.Window(limit=LOG_LIMIT_BYTES)
        seen = 0
        try:
            with transport_.reading(what, stalled="the log stream did not finish in time"):
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
        found = await self.transport.json(
            "GET",
            f"/api/v1/namespaces/{namespace}/events",
            query=[("fieldSelector", f"involvedObject.uid={uid}"), ("limit", str(EVENTS_LIST_LIMIT))],
            what=f"list events of pod uid={uid} in {namespace}",
        )
        items: builtins.list[Object] = found.get("items") or []
        return items

    def pod_events_listing(self, *, namespace: str | None) -> transport_.Listing:
        """Every Pod's Events (``POD_EVENTS_SELECTOR``), in one namespace or all, for an informer."""
        return transport_.Listing(
            transport=self.transport,
            path=core.core_path(namespace, "events"),
            field_selector=POD_EVENTS_SELECTOR,
            what=f"pod events {namespace or 'everywhere'}",
        )

    def worker_pods_listing(self, *, namespace: str | None) -> transport_.Listing:
        """Every worker Pod (it carries the execution label), in one namespace or all."""
        return transport_.Listing(
            transport=self.transport,
            path=core.core_path(namespace, "pods"),
            field_selector="",
            label_selector=labels.EXECUTION,
            what=f"worker pods {namespace or 'everywhere'}",
        )

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
        return await self.transport.json(
            "PATCH",
            path,
            body=patch,
            what=f"set activeDeadlineSeconds of pod {namespace}/{name} uid={uid}",
            content_type="application/json-patch+json",
        )
