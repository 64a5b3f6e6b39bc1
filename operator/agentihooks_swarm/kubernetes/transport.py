"""The one connection to the API server that every client of the operator shares.

Requests go through kubernetes-asyncio's generic ``ApiClient.call_api`` with
``_preload_content=False`` so that:

* objects come back as the raw JSON the API server sent (a terminated state keeps every field,
  camelCase, including ones newer than this client's models);
* every failure is sorted by status into the package's error tree here, once
  (:mod:`agentihooks_swarm.errors`), instead of leaking ``ApiException`` upwards.

The clients named for what they hold (:mod:`.pods`, :mod:`.core`, :mod:`.custom`, :mod:`.leases`,
:mod:`.posting`) each send through one :class:`Transport`, so a ``429`` that one of them is
answered holds back the others too (:mod:`.clients` builds them on one).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Final

import aiohttp
from kubernetes_asyncio import client as k8s

from agentihooks_swarm import errors

Object = dict[str, Any]

#: The longest a ``429 Too Many Requests`` holds back the client's next requests, whatever its
#: ``Retry-After`` says (a Lease renewal waits too), and the hold when it says nothing.
HOLD_CAP_SECONDS: Final = 5.0
HOLD_DEFAULT_SECONDS: Final = 1.0


def status_error(*, status: int, body: bytes, what: str) -> errors.ApiError:
    """The error an answer of ``status`` is, sorted by its status and the API server's reason."""
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
def reading(what: str, *, stalled: str = "the answer did not arrive in time") -> Iterator[None]:
    """Sort a failure while an answer's body is read: a timeout, or a broken connection."""
    try:
        yield
    except errors.ApiError:
        raise
    except TimeoutError as e:
        raise errors.ApiTimeout(f"{what}: {stalled}") from e
    except (aiohttp.ClientError, OSError) as e:
        raise errors.ApiUnavailable(f"{what}: {type(e).__name__}: {errors.trim(str(e))}") from e


def retry_after(headers: Mapping[str, str]) -> float:
    """The seconds a 429 asks the client to wait (``Retry-After``, in seconds), within the cap."""
    try:
        asked = float(headers.get("Retry-After") or HOLD_DEFAULT_SECONDS)
    except ValueError:
        asked = HOLD_DEFAULT_SECONDS
    return min(max(asked, 0.0), HOLD_CAP_SECONDS)


class Transport:
    """Requests to the API server, their answers' errors sorted, and the hold after a 429.

    A ``429 Too Many Requests`` holds back every later request of this transport for the seconds
    its ``Retry-After`` asks (as client-go does): the API server sheds load, and the 32 steps at
    once would otherwise each fail fast and try the next Execution, sending hundreds of requests a
    second into the overload. The request that was answered 429 still fails (ApiUnavailable).
    """

    def __init__(
        self, *, api: k8s.ApiClient, timeout: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._api = api
        self.timeout = timeout
        self._clock = clock
        #: No request is sent before this time (a 429's Retry-After).
        self._held_until = 0.0

    async def _hold(self) -> None:
        wait = self._held_until - self._clock()
        if wait > 0:
            await asyncio.sleep(wait)

    async def request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: list[tuple[str, str]] | None = None,
        body: Object | list[Object] | None = None,
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
                _request_timeout=timeout_seconds or self.timeout,
            )
        except TimeoutError as e:
            raise errors.ApiTimeout(f"{what}: no answer within {timeout_seconds or self.timeout}s") from e
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
            raise status_error(status=response.status, body=payload, what=what)
        return response

    async def json(self, method: str, path: str, *, what: str, **kwargs: Any) -> Object:
        """Send one request and return its answer's JSON object."""
        response = await self.request(method, path, what=what, **kwargs)
        try:
            with reading(what):
                raw = await response.read()
        finally:
            response.release()
        result: Object = json.loads(raw)
        return result

    async def send(self, method: str, path: str, *, what: str, body: Object) -> None:
        """Send one request whose answer's body nobody reads (a delete, an Event)."""
        response = await self.request(method, path, what=what, body=body)
        response.release()

    @staticmethod
    async def read_all(response: aiohttp.ClientResponse, *, what: str, cap: int) -> bytes:
        """An answer's body, at most ``cap`` bytes of it; the response is released."""
        data = bytearray()
        try:
            with reading(what):
                while len(data) < cap:
                    chunk = await response.content.read(cap - len(data))
                    if not chunk:
                        break
                    data += chunk
            return bytes(data)
        finally:
            response.release()

    async def _page(
        self, path: str, *, field_selector: str, limit: int, cont: str, what: str, label_selector: str = ""
    ) -> Object:
        """One page of a list (``items``, and ``metadata.continue`` / ``resourceVersion``)."""
        query = [("fieldSelector", field_selector), ("limit", str(limit))]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if cont:
            query.append(("continue", cont))
        return await self.json("GET", path, query=query, what=what)

    async def pages(
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

    @contextlib.asynccontextmanager
    async def watching(
        self,
        path: str,
        *,
        field_selector: str,
        version: str,
        seconds: int,
        what: str,
        label_selector: str = "",
    ) -> AsyncIterator[AsyncIterator[Object]]:
        """A watch from ``version``: entering sends the request, iterating yields its events."""
        query = [
            ("watch", "1"),
            ("fieldSelector", field_selector),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(seconds)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        response = await self.request(
            "GET",
            path,
            query=query,
            timeout_seconds=seconds + self.timeout,
            what=what,
        )
        try:
            yield self._watch_events(response, what=what)
        finally:
            response.release()

    @staticmethod
    async def _watch_events(response: aiohttp.ClientResponse, *, what: str) -> AsyncIterator[Object]:
        with reading(what, stalled="the stream stalled"):
            async for line in response.content:
                if line.strip():
                    event: Object = json.loads(line)
                    yield event


@dataclasses.dataclass(frozen=True, kw_only=True)
class Listing:
    """One kind of object at one path, listed page by page and watched (an informer's source)."""

    transport: Transport
    path: str
    field_selector: str
    what: str
    label_selector: str = ""

    def pages(self, *, limit: int) -> AsyncIterator[Object]:
        return self.transport.pages(
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
        return self.transport.watching(
            self.path,
            field_selector=self.field_selector,
            label_selector=self.label_selector,
            version=version,
            seconds=seconds,
            what=f"watch {self.what}",
        )
