"""One error tree for everything the operator talks to.

Kubernetes answers are sorted by HTTP status, the way kopf sorts its own: a refusal the
caller cannot fix by waiting (403, 404, 409, 422, …) is an :class:`ApiRefused`; an answer that
says "try later" (429, 5xx) or a broken connection is an :class:`ApiUnavailable`, which *is* a
:class:`ConnectionError`; a request that ran out of time is an :class:`ApiTimeout`, which *is* a
:class:`TimeoutError`. The spec names exactly these three for a failed log read.

Only the handler edge (``handlers.py``) turns these into ``kopf.TemporaryError`` or
``kopf.PermanentError``; everything below it raises and catches these classes.
"""

from __future__ import annotations

#: Longest excerpt of a server's answer that goes into an exception's text (and so into logs).
MAX_DETAIL = 300


def trim(text: str, *, limit: int = MAX_DETAIL) -> str:
    """Shorten a server's answer for a log line, saying how much was cut."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


class SwarmError(Exception):
    """The root of every error this package raises on purpose."""


class ApiError(SwarmError):
    """A Kubernetes API request did not give the answer we wanted."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


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


class InvalidResource(SwarmError):
    """A custom resource's spec cannot be acted on (unknown swarm, bad name, …)."""
