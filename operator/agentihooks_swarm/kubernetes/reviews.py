"""Whether a bearer token may read ``/metrics``: the API server decides, as for a kube-apiserver
extension or an operator built on controller-runtime (its ``WithAuthenticationAndAuthorization``
filter): a TokenReview says who the token is, a SubjectAccessReview whether that user may ``get``
the non-resource URL ``/metrics``. Answers are kept a few seconds by a hash of the token, so a
scrape every few seconds costs two API requests at most every ``keep_seconds``."""

from __future__ import annotations

import collections
import hashlib
import time
from collections.abc import Callable
from typing import Any, Final, Literal

from agentihooks_swarm.kubernetes import transport as transport_

#: What the API server said of a token: not a token it knows, a user without the right, or allowed.
Verdict = Literal["unauthenticated", "forbidden", "allowed"]
#: How long an answer is kept (controller-runtime's authentication cache keeps 10 s too).
KEEP_SECONDS: Final = 10.0
#: The most tokens whose answers are kept.
MAX_KEPT: Final = 256


class Reviewer:
    def __init__(
        self,
        *,
        transport: transport_.Transport,
        path: str = "/metrics",
        keep_seconds: float = KEEP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self.path = path
        self.keep_seconds = keep_seconds
        self._clock = clock
        self._kept: collections.OrderedDict[str, tuple[float, Verdict]] = collections.OrderedDict()

    async def verdict(self, *, token: str) -> Verdict:
        """Whether the token is valid and its user may get ``path``. An API server that cannot
        answer raises (``errors.ApiError``): nothing is served then, and nothing kept."""
        key = hashlib.sha256(token.encode()).hexdigest()
        kept = self._kept.get(key)
        now = self._clock()
        if kept is not None and now - kept[0] < self.keep_seconds:
            return kept[1]
        allowed = await self._review(token)
        self._kept[key] = (now, allowed)
        self._kept.move_to_end(key)
        while len(self._kept) > MAX_KEPT:
            self._kept.popitem(last=False)
        return allowed

    async def _review(self, token: str) -> Verdict:
        review = await self.transport.json(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            what="review a metrics token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        status: dict[str, Any] = review.get("status") or {}
        if not status.get("authenticated"):
            return "unauthenticated"
        user: dict[str, Any] = status.get("user") or {}
        spec: dict[str, Any] = {
            "user": user.get("username", ""),
            "groups": user.get("groups") or [],
            "nonResourceAttributes": {"path": self.path, "verb": "get"},
        }
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        access = await self.transport.json(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            what=f"authorize {spec['user']} to get {self.path}",
            body={"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        return "allowed" if (access.get("status") or {}).get("allowed") else "forbidden"
