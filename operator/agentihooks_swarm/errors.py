"""One error tree for everything the operator talks to.

Kubernetes answers are sorted by HTTP status, the way kopf sorts its own: a refusal the
caller cannot fix by waiting (403, 404, 409, 422, …) is an :class:`ApiRefused`; an answer that
says "try later" (429, 5xx) or a broken connection is an :class:`ApiUnavailable`, which *is* a
:class:`ConnectionError`; a request that ran out of time is an :class:`ApiTimeout`, which *is* a
:class:`TimeoutError`. The spec names exactly these three for a failed log read.

kopf sees none of them: an Execution's step (``lifecycle/step.py``, not kopf's) turns each into a
status, a retry or a failed cleanup pass, and the Swarm handler (``handlers.py``) logs the one it
may meet and waits for the next event.
"""

from __future__ import annotations

#: Longest excerpt of a server's answer that goes into an exception's text (and so into logs).
MAX_DETAIL = 300
#: Longest excerpt of a server's answer quoted in an Execution's condition and Event.
MAX_QUOTE = 900


def trim(text: str, *, limit: int = MAX_DETAIL) -> str:
    """Shorten a server's answer for a log line, saying how much was cut."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


class SwarmError(Exception):
    """The root of every error this package raises on purpose."""


class InvalidPattern(SwarmError, ValueError):
    """A redaction pattern (a setting's or a Swarm's) that does not compile or may take
    exponential time. A :class:`ValueError` too, so that pydantic reports it as an invalid value."""


class ApiError(SwarmError):
    """A Kubernetes API request did not give the answer we wanted."""

    def __init__(
        self, message: str, *, status: int | None = None, reason: str = "", detail: str = ""
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        #: The API server's own message (trimmed to :data:`MAX_QUOTE`), quoted in conditions.
        self.detail = detail


class ApiRefused(ApiError):
    """The API server refused the request for good (403, 404, 409, 422, …); waiting will not help."""


class NotFound(ApiRefused):
    """404: the object is not there."""


class AlreadyExists(ApiRefused):
    """409 AlreadyExists on a create: an object of that name exists."""


class PreconditionFailed(ApiRefused):
    """409 Conflict on a delete with a UID precondition: the object was replaced."""


class ApiUnavailable(ApiError, ConnectionError):
    """429, 5xx or a broken connection: the API server may answer later."""


class ApiTimeout(ApiError, TimeoutError):
    """The request did not finish within the client timeout."""


class StoreUnavailable(SwarmError, ConnectionError):
    """Redis could not be reached or did not answer in time."""


class NotDurable(StoreUnavailable):
    """The primary took the write, but fewer replicas than ``REDIS_MIN_REPLICAS`` acknowledged it
    in time: it is not durable yet, so nothing that depends on it may happen."""


class AclRefused(SwarmError):
    """Redis refused ``ACL SETUSER`` (no permission, or no ACL at all: a managed Redis): the
    operator cannot make a worker's Redis user, so one must be supplied (docs/workers.md)."""


class InvalidCredential(SwarmError, ValueError):
    """A worker's Redis credential (its mounted Secret, or its variables) is given but unusable."""


class Unwatchable(SwarmError):
    """The Redis topology's primary cannot be watched for failovers (a cluster, or ``INFO``
    refused): evidence a failover loses is not put back."""


class StaleWrite(SwarmError):
    """A record changed since this step read it (a compare-and-set failed): nothing was written.

    The step stops and the next one reads the records again; a stale writer never replaces
    evidence that another step stored.
    """


class Forgotten(SwarmError):
    """The records of the life this step writes for were forgotten (``records forget``, or the
    retention sweep) since it began: nothing was written, and nothing of that life will be.

    A deleted Execution's step can still be in flight when its user forgets its records; its late
    writes would bring back what the user removed.
    """


class SlugHeld(SwarmError):
    """A swarm's slug cannot be released: another namespace owns it, or records of it are left."""


class NotLeader(SwarmError):
    """This replica does not hold the lease; it must not write or delete."""


class InvalidResource(SwarmError):
    """A custom resource's spec cannot be acted on (unknown swarm, bad name, …)."""


#: The answers that say the request itself is wrong: the same body will be refused again.
INVALID_STATUSES = frozenset({400, 422})


def is_invalid(error: ApiError) -> bool:
    """Whether the API server refused the request's body (400 BadRequest, 422 Invalid)."""
    return error.status in INVALID_STATUSES


class SpecRejected(SwarmError):
    """The API server refused an object the operator built from a user's spec (400 or 422).

    Not transient: the same spec builds the same object, refused the same way, so the handler
    reports it on the Execution and waits for the spec or the Swarm to change.
    """

    def __init__(self, *, kind: str, namespace: str, name: str, detail: str) -> None:
        super().__init__(f"The API server refused {kind} {namespace}/{name}: {detail}")
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.detail = detail
