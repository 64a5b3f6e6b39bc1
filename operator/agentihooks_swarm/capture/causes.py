"""Why a read through the API server failed, in one word, and the hint that fits it. Pure, no I/O.

A log read goes from the API server to the Pod's kubelet. When that kubelet does not answer (a
kubelet restart, a frozen node, a network blip), the API server answers 5xx with the dial or
TLS error it saw; that is not the same trouble as a refusal (403: the Role lacks ``pods/log``),
an overloaded API server (429) or our own client's timeout, and each needs its own advice.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from agentihooks_swarm import errors

#: What the API server says when it could not reach a kubelet (lower case, searched in its message).
_KUBELET_UNREACHABLE: Final = (
    "tls handshake timeout",
    "dial tcp",
    "connection refused",
    "no route to host",
    "i/o timeout",
    "connection reset",
    "kubelet",
    "error trying to reach service",
    "proxy error",
    "eof",
)

REFUSED: Final = "refused"
NODE_UNREACHABLE: Final = "node_unreachable"
UNAVAILABLE: Final = "unavailable"
TIMEOUT: Final = "timeout"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cause:
    #: ``refused``, ``node_unreachable``, ``unavailable`` or ``timeout`` (the metrics' label).
    name: str
    #: What to do about it, as the end of a log line or a condition.
    hint: str

    @property
    def may_pass(self) -> bool:
        """Whether waiting may help (an outage), as opposed to a refusal that a person must fix."""
        return self.name != REFUSED


def of(error: BaseException, *, what: str = "log") -> Cause:
    """The cause of a failed read of a Pod's ``what`` (its log, its Events)."""
    if isinstance(error, errors.ApiRefused):
        if error.status == 403:
            hint = (
                f"check the controller Role for get on pods/{what}"
                if what == "log"
                else (f"check the controller Role for list on {what}")
            )
        else:
            hint = "the API server refused the read; see its answer"
        return Cause(name=REFUSED, hint=hint)
    if isinstance(error, TimeoutError):
        return Cause(
            name=TIMEOUT,
            hint="no answer within AGENTIHOOKS_SWARM_API_TIMEOUT_SECONDS; the API server or the "
            "Pod's node is slow",
        )
    text = str(error).lower()
    status = error.status if isinstance(error, errors.ApiError) else None
    if status is not None and status >= 500 and any(sign in text for sign in _KUBELET_UNREACHABLE):
        return Cause(
            name=NODE_UNREACHABLE,
            hint="the API server could not reach the Pod's kubelet (a kubelet restart, a frozen "
            "node or a network blip); the read is retried",
        )
    if status == 429:
        return Cause(name=UNAVAILABLE, hint="the API server is overloaded (429); the read is retried")
    return Cause(
        name=UNAVAILABLE,
        hint="the API server failed or the connection broke; the read is retried",
    )
