"""Only one controller acts: a coordination.k8s.io Lease, checked before each write and delete.

Every replica watches; only the holder of the Lease steps Executions (:mod:`.reconciler`), sweeps
retention, expires Done Executions and relaunches after a Swarm change. :meth:`Leadership.check`
is the hard check, before every Redis write and every delete, that a replica which lost the
lease mid-step stops before its next write.

A replica holds the lease until ``renewTime + leaseDurationSeconds`` as the *others* see it; it
counts its own hold from the moment it *sent* the renewal, minus a safety margin, so it always
believes it has lost the lease before anyone else may take it.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from agentihooks_swarm import errors
from agentihooks_swarm.kubernetes import leases as leases_

logger = logging.getLogger(__name__)


def identity() -> str:
    """This replica: its host's name (a Pod's name in a cluster) and its process id."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


NotLeader = errors.NotLeader


class Leadership:
    def __init__(
        self,
        *,
        leases: leases_.LeaseClient,
        namespace: str,
        name: str,
        holder: str,
        duration: float = 15.0,
        margin: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._leases = leases
        self.namespace = namespace
        self.name = name
        self.holder = holder
        self.duration = duration
        self.margin = margin
        self._clock = clock
        self._held_until = 0.0

    def holds(self) -> bool:
        return self._clock() < self._held_until

    def check(self, *, before: str) -> None:
        """Raise :class:`NotLeader` unless this replica holds the lease now."""
        if not self.holds():
            raise NotLeader(f"not the leader (lease {self.namespace}/{self.name}); skipped {before}")

    async def attempt(self) -> bool:
        """One acquire-or-renew round trip. Returns whether this replica holds the lease."""
        sent_at = self._clock()
        now = datetime.datetime.now(datetime.UTC)
        try:
            lease = await self._leases.read(namespace=self.namespace, name=self.name)
            spec: dict[str, Any] = {
                "holderIdentity": self.holder,
                "leaseDurationSeconds": int(self.duration),
                "renewTime": _rfc3339(now),
            }
            if lease is None:
                spec["acquireTime"] = _rfc3339(now)
                await self._leases.create(
                    namespace=self.namespace,
                    body={
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": spec,
                    },
                )
            else:
                current = lease.get("spec") or {}
                renewed = _parse(current.get("renewTime")) or _parse(current.get("acquireTime"))
                length = float(current.get("leaseDurationSeconds") or self.duration)
                free = (
                    not current.get("holderIdentity")
                    or renewed is None
                    or renewed + datetime.timedelta(seconds=length) < now
                )
                if current.get("holderIdentity") != self.holder and not free:
                    self._held_until = 0.0
                    return False
                if current.get("holderIdentity") != self.holder:
                    spec["acquireTime"] = _rfc3339(now)
                    spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
                    logger.info(
                        "Taking the lease %s/%s from %r.",
                        self.namespace,
                        self.name,
                        current.get("holderIdentity"),
                    )
                else:
                    spec["acquireTime"] = current.get("acquireTime") or _rfc3339(now)
                    spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0)
                lease["spec"] = spec
                await self._leases.replace(namespace=self.namespace, body=lease)
        except errors.ApiError as e:
            verb = "renew" if self.holds() else "acquire"
            logger.warning("Could not %s the lease %s/%s: %s", verb, self.namespace, self.name, e)
            return self.holds()  # Keep what we had until it runs out; never extend it on failure.
        was = self.holds()
        self._held_until = sent_at + self.duration - self.margin
        if not was:
            logger.info(
                "This replica (%s) now holds the lease %s/%s.", self.holder, self.namespace, self.name
            )
        return True

    async def run(self, *, on_change: Callable[[bool], None] | None = None) -> None:
        """Acquire and renew forever (a background task); ``on_change`` hears every gain and loss."""
        held = False
        while True:
            now_held = await self.attempt()
            if now_held != held and on_change is not None:
                on_change(now_held)
            held = now_held
            await asyncio.sleep(self.duration / 5 if held else self.duration / 3)

    async def release(self) -> None:
        """Give the lease up on shutdown so a standby need not wait for it to expire."""
        if not self.holds():
            return
        self._held_until = 0.0
        try:
            lease = await self._leases.read(namespace=self.namespace, name=self.name)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.holder:
                lease["spec"]["holderIdentity"] = ""
                await self._leases.replace(namespace=self.namespace, body=lease)
        except errors.ApiError as e:
            logger.warning("Could not release the lease: %s", e)
