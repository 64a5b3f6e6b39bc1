"""EventClient: the core/v1 Events the operator posts about its objects (Executions, Swarms)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from agentihooks_swarm.kubernetes import transport as transport_

Object = transport_.Object


class EventClient:
    """Posts Events, each about one object, from the operator on one replica."""

    def __init__(self, *, transport: transport_.Transport) -> None:
        self.transport = transport

    async def post(
        self,
        *,
        involved: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        component: str,
        instance: str,
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
            "involvedObject": dict(involved),
            "firstTimestamp": now.isoformat(timespec="seconds").replace("+00:00", "Z"),
            "lastTimestamp": now.isoformat(timespec="seconds").replace("+00:00", "Z"),
            "eventTime": now.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "count": 1,
        }
        await self.transport.send(
            "POST", f"/api/v1/namespaces/{namespace}/events", body=body, what=f"post event {reason}"
        )
