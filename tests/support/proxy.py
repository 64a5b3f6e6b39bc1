"""A programmable fault-injecting reverse proxy for the Kubernetes API.

It sits between a Kubernetes client (kubernetes-asyncio, kopf, kubectl) and the
REAL kube-apiserver: the client talks plain HTTP to ``127.0.0.1:PORT`` (or HTTPS
with a given serving certificate: Go clients such as kubectl send no bearer
token over plain HTTP), the proxy forwards to the upstream (HTTPS verified
against a CA file, or plain HTTP for local tests) and streams the answer back,
so watches and log streams flow incrementally and stay open.

Faults are rules: a method + a path regex (``re.fullmatch`` on the decoded
path) + an optional query regex (``re.search`` on the decoded query string),
with an action -- answer with a Kubernetes ``Status`` error, delay, hang,
reset the connection (before or after the upstream saw the request), or end a
watch with an ``ERROR`` event -- for the next ``times`` matching requests or
always (``times=None``). The first matching rule wins. Every request is
recorded as ``Call(method, path, query)`` in arrival order.

Two ways to run it, same object, same (thread-safe, synchronous) rule and
counting API::

    async with FaultProxy(upstream=server, ca_file=ca) as proxy:   # in this loop
        ...

    with FaultProxy(upstream=server, ca_file=ca) as proxy:         # own thread + loop
        ...                                                        # (or start_in_thread())

Not supported: connection upgrades (``exec``/``attach``/``port-forward``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, NotRequired, Self, TypedDict, Unpack
from urllib.parse import unquote

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

__all__ = [
    "WATCH_QUERY",
    "Call",
    "Cut",
    "Delay",
    "FaultProxy",
    "Forward",
    "Hang",
    "Reset",
    "Respond",
    "Rule",
    "WatchError",
    "kubernetes_status",
]

# -- actions --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Forward:
    """Pass the request to the upstream (the default when no rule matches)."""


@dataclass(frozen=True, kw_only=True)
class Respond:
    """Answer without asking the upstream, with a Kubernetes ``Status`` body.

    ``reason``/``message``/``details`` default to what kube-apiserver would say
    for this status and request; ``body`` (bytes or a JSON-able mapping)
    replaces the Status body entirely. A 429 gets ``Retry-After`` (and
    ``details.retryAfterSeconds``) of ``retry_after`` seconds.
    """

    status: int
    reason: str | None = None
    message: str | None = None
    details: Mapping[str, Any] | None = None
    retry_after: int | None = 1
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Delay:
    """Sleep ``seconds``, then do ``then``.

    ``after_forward=True`` forwards first and delays the *response* instead: the
    upstream has executed the request even if the client gave up waiting.
    """

    seconds: float
    then: Forward | Respond | Reset | WatchError = field(default_factory=Forward)
    after_forward: bool = False


@dataclass(frozen=True, kw_only=True)
class Hang:
    """Never answer (until the client disconnects or the proxy stops)."""


@dataclass(frozen=True, kw_only=True)
class Reset:
    """Abort the client's TCP connection without a response.

    ``after_forward=True`` first sends the request upstream and reads the whole
    answer: the change was made, but the client never learns it ("lost reply").
    """

    after_forward: bool = False


@dataclass(frozen=True, kw_only=True)
class Cut:
    """Forward, send the answer's status, headers and its first ``after_bytes`` body bytes, then
    abort the connection: a stream (a watch, a log) dropped mid-answer, as a restarting API
    server or a broken network drops it. Unlike :class:`Reset`, the client has an answer, so no
    HTTP client sends the request again on its own."""

    after_bytes: int = 0


@dataclass(frozen=True, kw_only=True)
class WatchError:
    """Answer a watch with 200 and one ``{"type": "ERROR", "object": Status}`` event, then end it.

    The default is what the server sends when the resourceVersion is too old
    (410 Expired).
    """

    code: int = 410
    reason: str = "Expired"
    message: str = "too old resource version: 1 (2)"


Action = Forward | Respond | Delay | Hang | Reset | Cut | WatchError


WATCH_QUERY: re.Pattern[str] = re.compile(r"(^|&)watch=(true|1)(&|$)", re.IGNORECASE)
"""Matches the query of a watch request (kubernetes-asyncio sends ``watch=True``, kopf ``watch=true``)."""

# -- rules and records ----------------------------------------------------------------------------


class Matched(TypedDict):
    """Which requests a rule of :meth:`FaultProxy.fail`, ``delay``, ``hang`` or ``reset`` takes:
    ``path`` (a full match), ``method`` (any when unset), ``query`` (a search), for the next
    ``times`` of them (1 when unset; None: all of them)."""

    path: str | re.Pattern[str]
    method: NotRequired[str | None]
    query: NotRequired[str | re.Pattern[str] | None]
    times: NotRequired[int | None]


class Wanted(TypedDict, total=False):
    """Which recorded requests: ``method`` (any when unset), ``path`` (a full match), ``query``
    (a search)."""

    method: str | None
    path: str | re.Pattern[str] | None
    query: str | re.Pattern[str] | None


class Call(NamedTuple):
    """One request seen by the proxy; path and query fully percent-decoded (``labelSelector=app=x``)."""

    method: str
    path: str
    query: str


@dataclass(kw_only=True, eq=False)
class Rule:
    """What to do with matching requests. Made by :meth:`FaultProxy.add_rule` and friends."""

    method: str | None
    path: re.Pattern[str]
    query: re.Pattern[str] | None
    action: Action
    times: int | None
    hits: int = 0

    def matches(self, *, method: str, path: str, query: str) -> bool:
        if self.method is not None and self.method != method.upper():
            return False
        if self.path.fullmatch(path) is None:
            return False
        return self.query is None or self.query.search(query) is not None

    @property
    def remaining(self) -> int | None:
        return None if self.times is None else max(self.times - self.hits, 0)

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.hits >= self.times


def _compile(pattern: str | re.Pattern[str]) -> re.Pattern[str]:
    return pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)


# -- Kubernetes Status bodies ---------------------------------------------------------------------

_REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Gone",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

_VERBS: dict[str, str] = {
    "GET": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
    "HEAD": "get",
}


@dataclass(frozen=True, kw_only=True)
class _Target:
    group: str
    resource: str
    namespace: str | None
    name: str | None
    subresource: str | None


def _parse_path(path: str) -> _Target | None:
    """Split ``/api/v1/namespaces/ns/pods/name/log`` style paths; None for non-resource paths."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    elif len(rest) == 2 and rest[0] == "namespaces":
        return _Target(group="", resource="namespaces", namespace=None, name=rest[1], subresource=None)
    if not rest:
        return None
    return _Target(
        group=group,
        resource=rest[0],
        namespace=namespace,
        name=rest[1] if len(rest) > 1 else None,
        subresource=rest[2] if len(rest) > 2 else None,
    )


def _body_name(body: bytes) -> str | None:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(doc, dict):
        metadata = doc.get("metadata")
        if isinstance(metadata, dict):
            name = metadata.get("name")
            if isinstance(name, str):
                return name
    return None


@dataclass(frozen=True, kw_only=True)
class _Asked:
    """What a request asked for, as kube-apiserver's messages name it."""

    target: _Target | None
    method: str
    name: str | None
    verb: str
    qualified: str
    """``resource`` or ``resource.group``; empty for a non-resource path."""
    qualified_sub: str
    """:attr:`qualified` with ``/subresource`` when there is one."""


def _asked(*, method: str, path: str, query: str, request_body: bytes) -> _Asked:
    target = _parse_path(path)
    method = method.upper()
    watching = WATCH_QUERY.search(query) is not None
    verb = "watch" if watching else _VERBS.get(method, method.lower())
    name = target.name if target is not None else None
    if name is None and method == "POST":
        name = _body_name(request_body)
    if target is not None and target.name is None and method == "GET" and not watching:
        verb = "list"
    qualified = (
        ""
        if target is None
        else (target.resource if not target.group else f"{target.resource}.{target.group}")
    )
    if target is not None and target.subresource:
        qualified_sub = f"{qualified}/{target.subresource}"
    else:
        qualified_sub = qualified
    return _Asked(
        target=target, method=method, name=name, verb=verb, qualified=qualified, qualified_sub=qualified_sub
    )


def _forbidden(asked: _Asked, *, path: str) -> str:
    target, name = asked.target, asked.name
    where = f' in the namespace "{target.namespace}"' if target and target.namespace else ""
    named = f' "{name}"' if name is not None and asked.method != "POST" else ""
    group = target.group if target else ""
    resource = target.resource if target else "nonResourceURL"
    sub = f"/{target.subresource}" if target and target.subresource else ""
    return (
        f'{asked.qualified_sub or path}{named} is forbidden: User "system:serviceaccount:test:proxy" '
        f'cannot {asked.verb} resource "{resource}{sub}" in API group "{group}"{where}'
    )


def _default_status(
    code: int, asked: _Asked, *, path: str, retry_after: int | None
) -> tuple[str, str, dict[str, Any]]:
    """The reason, message and details kube-apiserver gives for ``code`` on this request."""
    target, name, qualified = asked.target, asked.name, asked.qualified
    reason = _REASONS.get(code, "Unknown")
    details: dict[str, Any] = {}
    if target is not None:
        if name is not None:
            details["name"] = name
        if target.group:
            details["group"] = target.group
        details["kind"] = target.resource
    if code == 403:
        message = _forbidden(asked, path=path)
    elif code == 404:
        message = (
            f'{qualified} "{name}" not found'
            if name is not None
            else "the server could not find the requested resource"
        )
    elif code == 409 and asked.method == "POST":
        reason = "AlreadyExists"
        message = f'{qualified} "{name or ""}" already exists'
    elif code == 409:
        message = (
            f'Operation cannot be fulfilled on {qualified} "{name or ""}": the object has been modified; '
            "please apply your changes to the latest version and try again"
        )
    elif code == 410:
        reason = "Expired"
        message = "too old resource version: 1 (2)"
    elif code == 422:
        message = f'{qualified} "{name or ""}" is invalid'
    elif code == 429:
        message = "Too many requests, please try again later."
        details = {"retryAfterSeconds": retry_after if retry_after is not None else 1}
    elif code == 500:
        message = "Internal error occurred: injected by the test proxy"
        details = {"causes": [{"message": "injected by the test proxy"}]}
    elif code == 503:
        message = "the server is currently unable to handle the request"
    elif code == 504:
        message = (
            "the server was unable to return a response in the time allotted, but may still be "
            "processing the request"
        )
    elif code == 401:
        message = "Unauthorized"
        details = {}
    else:
        message = f"injected status {code}"
    return reason, message, details


def kubernetes_status(
    *,
    code: int,
    method: str = "GET",
    path: str = "/",
    query: str = "",
    request_body: bytes = b"",
    reason: str | None = None,
    message: str | None = None,
    details: Mapping[str, Any] | None = None,
    retry_after: int | None = None,
) -> dict[str, Any]:
    """The ``Status`` object kube-apiserver would send for ``code`` on this request."""
    asked = _asked(method=method, path=path, query=query, request_body=request_body)
    default_reason, default_message, default_details = _default_status(
        code, asked, path=path, retry_after=retry_after
    )
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message if message is not None else default_message,
        "reason": reason if reason is not None else default_reason,
        "code": code,
    }
    chosen_details = dict(details) if details is not None else default_details
    if chosen_details:
        status["details"] = chosen_details
    return status


# -- the proxy ------------------------------------------------------------------------------------

# RFC 9110 7.6.1 hop-by-hop headers, plus those the proxy recomputes itself.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_FORWARDED_UP = _HOP_BY_HOP | {"host", "content-length"}
_NOT_FORWARDED_DOWN = _HOP_BY_HOP | {"content-length"}
_HANG_SECONDS = 24 * 3600.0


def _strip(headers: Mapping[str, str] | Iterable[tuple[str, str]], drop: frozenset[str]) -> CIMultiDict[str]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    pairs = list(items)
    listed: set[str] = set()
    for key, value in pairs:
        if key.lower() == "connection":
            listed.update(token.strip().lower() for token in value.split(",") if token.strip())
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in pairs:
        lowered = key.lower()
        if lowered in drop or lowered in listed:
            continue
        out.add(key, value)
    return out


class FaultProxy:
    """Reverse proxy in front of ``upstream`` with programmable faults.

    It listens on plain HTTP, or on HTTPS when ``tls_cert_file``/``tls_key_file``
    are given (``tls_ca_file``: the CA that signed them, written into
    :meth:`kubeconfig`). Go clients (kubectl, client-go) do not send a bearer
    token to a plain ``http://`` server, so they need the HTTPS mode; Python
    clients (kubernetes-asyncio, kopf) work with either.

    Rule and counting methods are synchronous and thread-safe, so they work the
    same whether the proxy runs in the test's loop or in its own thread.
    """

    def __init__(
        self,
        *,
        upstream: str,
        ca_file: Path | str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        connect_timeout: float = 10.0,
        tls_cert_file: Path | str | None = None,
        tls_key_file: Path | str | None = None,
        tls_ca_file: Path | str | None = None,
    ) -> None:
        if (tls_cert_file is None) != (tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        self._tls_cert_file = Path(tls_cert_file) if tls_cert_file is not None else None
        self._tls_key_file = Path(tls_key_file) if tls_key_file is not None else None
        self._tls_ca_file = Path(tls_ca_file) if tls_ca_file is not None else None
        self._upstream = URL(upstream.rstrip("/"))
        if self._upstream.scheme not in ("http", "https"):
            raise ValueError(f"upstream must be http:// or https://, not {upstream!r}")
        self._ca_file = Path(ca_file) if ca_file is not None else None
        self._host = host
        self._requested_port = port
        self._port: int | None = None
        self._connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._calls: list[Call] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._thread_stop: asyncio.Event | None = None
        self._thread_error: BaseException | None = None

    # -- addresses --------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the proxy is not running")
        return self._port

    @property
    def scheme(self) -> str:
        return "https" if self._tls_cert_file is not None else "http"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (or ``https://``) -- point clients here."""
        return f"{self.scheme}://{self._host}:{self.port}"

    @property
    def upstream(self) -> str:
        return str(self._upstream)

    def kubeconfig(self, *, token: str, path: Path, namespace: str = "default") -> Path:
        """Write a kubeconfig for ``url`` with a bearer token (JSON, which is valid YAML)."""
        cluster: dict[str, str] = {"server": self.url}
        if self._tls_ca_file is not None:
            cluster["certificate-authority"] = str(self._tls_ca_file)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fault-proxy", "cluster": cluster}],
            "users": [{"name": "fault-proxy", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "fault-proxy",
                    "context": {"cluster": "fault-proxy", "user": "fault-proxy", "namespace": namespace},
                }
            ],
            "current-context": "fault-proxy",
            "preferences": {},
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2) + "\n")
        path.chmod(0o600)
        return path

    # -- rules ------------------------------------------------------------------------------------

    def add_rule(
        self,
        *,
        path: str | re.Pattern[str],
        action: Action,
        method: str | None = None,
        query: str | re.Pattern[str] | None = None,
        times: int | None = None,
    ) -> Rule:
        """Append a rule (first match wins). ``times=None``: forever; ``times=N``: next N matches."""
        if times is not None and times < 1:
            raise ValueError("times must be >= 1 or None")
        rule = Rule(
            method=method.upper() if method is not None else None,
            path=_compile(path),
            query=_compile(query) if query is not None else None,
            action=action,
            times=times,
        )
        with self._lock:
            self._rules.append(rule)
        return rule

    def fail(
        self,
        *,
        status: int,
        reason: str | None = None,
        message: str | None = None,
        retry_after: int | None = 1,
        **matched: Unpack[Matched],
    ) -> Rule:
        """Answer matching requests with a Kubernetes Status error."""
        return self._add(
            Respond(status=status, reason=reason, message=message, retry_after=retry_after), matched
        )

    def delay(self, *, seconds: float, after_forward: bool = False, **matched: Unpack[Matched]) -> Rule:
        """Forward matching requests ``seconds`` late (or their response, with ``after_forward``)."""
        return self._add(Delay(seconds=seconds, after_forward=after_forward), matched)

    def hang(self, **matched: Unpack[Matched]) -> Rule:
        """Never answer matching requests."""
        return self._add(Hang(), matched)

    def reset(self, *, after_forward: bool = False, **matched: Unpack[Matched]) -> Rule:
        """Abort the connection of matching requests (after the upstream ran it, with ``after_forward``)."""
        return self._add(Reset(after_forward=after_forward), matched)

    def _add(self, action: Action, matched: Matched) -> Rule:
        return self.add_rule(
            method=matched.get("method"),
            path=matched["path"],
            query=matched.get("query"),
            times=matched.get("times", 1),
            action=action,
        )

    def remove_rule(self, rule: Rule) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._rules.remove(rule)

    def clear_rules(self) -> None:
        with self._lock:
            self._rules.clear()

    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    def _take_action(self, call: Call) -> Action:
        """Record the call and pick (and charge) the first live matching rule."""
        with self._lock:
            self._calls.append(call)
            for rule in self._rules:
                if rule.exhausted:
                    continue
                if rule.matches(method=call.method, path=call.path, query=call.query):
                    rule.hits += 1
                    return rule.action
        return Forward()

    # -- counting ---------------------------------------------------------------------------------

    def calls(self) -> list[Call]:
        """Every request so far, in arrival order."""
        with self._lock:
            return list(self._calls)

    def count(self, **wanted: Unpack[Wanted]) -> int:
        """How many recorded requests match (path: fullmatch; query: search; unset: any)."""
        return len(self.matching_calls(**wanted))

    def matching_calls(self, **wanted: Unpack[Wanted]) -> list[Call]:
        path, query, method = wanted.get("path"), wanted.get("query"), wanted.get("method")
        path_re = _compile(path) if path is not None else None
        query_re = _compile(query) if query is not None else None
        method = method.upper() if method is not None else None
        return [
            call
            for call in self.calls()
            if (method is None or call.method == method)
            and (path_re is None or path_re.fullmatch(call.path) is not None)
            and (query_re is None or query_re.search(call.query) is not None)
        ]

    def reset_counts(self) -> None:
        with self._lock:
            self._calls.clear()

    async def wait_for_count(
        self, *, at_least: int = 1, timeout: float = 10.0, interval: float = 0.02, **wanted: Unpack[Wanted]
    ) -> int:
        """Poll (without blocking the loop) until ``count(...) >= at_least``; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self._reached(at_least=at_least, deadline=deadline, timeout=timeout, wanted=wanted)
            if seen is not None:
                return seen
            await asyncio.sleep(interval)

    def wait_for_count_blocking(
        self, *, at_least: int = 1, timeout: float = 10.0, interval: float = 0.02, **wanted: Unpack[Wanted]
    ) -> int:
        """Same as :meth:`wait_for_count` for sync code (proxy running in its own thread)."""
        deadline = time.monotonic() + timeout
        while (
            seen := self._reached(at_least=at_least, deadline=deadline, timeout=timeout, wanted=wanted)
        ) is None:
            time.sleep(interval)
        return seen

    def _reached(self, *, at_least: int, deadline: float, timeout: float, wanted: Wanted) -> int | None:
        """The count once it is ``at_least``; None while it may still get there; TimeoutError after
        ``deadline``."""
        seen = self.count(**wanted)
        if seen >= at_least:
            return seen
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"saw {seen} < {at_least} calls matching method={wanted.get('method')} "
                f"path={wanted.get('path')} query={wanted.get('query')} "
                f"within {timeout}s; calls: {self.calls()[-20:]}"
            )
        return None

    # -- in-loop lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start serving in the running event loop."""
        if self._runner is not None:
            raise RuntimeError("the proxy is already running")
        ssl_context: ssl.SSLContext | bool
        if self._upstream.scheme == "https":
            ssl_context = ssl.create_default_context(
                cafile=str(self._ca_file) if self._ca_file is not None else None
            )
        else:
            ssl_context = False
        connector = aiohttp.TCPConnector(ssl=ssl_context, limit=0)
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
            raise_for_status=False,
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(
            app,
            handler_cancellation=True,  # a client that goes away cancels its handler + upstream request
            access_log=None,
            shutdown_timeout=0.5,
        )
        await runner.setup()
        server_ssl: ssl.SSLContext | None = None
        if self._tls_cert_file is not None and self._tls_key_file is not None:
            server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server_ssl.load_cert_chain(str(self._tls_cert_file), str(self._tls_key_file))
        site = web.TCPSite(
            runner, self._host, self._requested_port, reuse_address=True, ssl_context=server_ssl
        )
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            await self._session.close()
            self._session = None
            raise
        self._runner = runner
        self._loop = asyncio.get_running_loop()
        self._port = int(runner.addresses[0][1])
        # Keep the port on a later start() so kubeconfigs written before stay valid.
        self._requested_port = self._port

    async def stop(self) -> None:
        """Stop serving; open streams (watches) are cut, both towards the client and upstream."""
        runner, session = self._runner, self._session
        self._runner = self._session = None
        if runner is not None:
            await runner.cleanup()
        if session is not None:
            await session.close()
        self._loop = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- threaded lifecycle -----------------------------------------------------------------------

    def start_in_thread(self, *, timeout: float = 10.0) -> Self:
        """Run the proxy in a daemon thread with its own event loop; returns when it listens."""
        if self._thread is not None:
            raise RuntimeError("the proxy thread is already running")
        ready = threading.Event()
        self._thread_error = None

        async def serve() -> None:
            self._thread_stop = asyncio.Event()
            try:
                await self.start()
            except BaseException as exc:
                self._thread_error = exc
                ready.set()
                return
            ready.set()
            try:
                await self._thread_stop.wait()
            finally:
                await self.stop()

        def run() -> None:
            asyncio.run(serve())

        thread = threading.Thread(target=run, name=f"fault-proxy->{self._upstream}", daemon=True)
        thread.start()
        if not ready.wait(timeout):
            raise TimeoutError(f"the proxy thread did not start listening within {timeout}s")
        if self._thread_error is not None:
            thread.join(timeout)
            raise RuntimeError("the proxy thread failed to start") from self._thread_error
        self._thread = thread
        return self

    def stop_thread(self, *, timeout: float = 10.0) -> None:
        """Stop a proxy started with :meth:`start_in_thread` and join its thread."""
        thread, loop, stop = self._thread, self._loop, self._thread_stop
        if thread is None:
            return
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"the proxy thread did not stop within {timeout}s")
        self._thread = None
        self._thread_stop = None

    def __enter__(self) -> Self:
        return self.start_in_thread()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_thread()

    # -- request handling -------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        call = Call(
            method=request.method.upper(), path=request.path, query=unquote(request.rel_url.raw_query_string)
        )
        body = await request.read()
        action = self._take_action(call)
        return await self._perform(action, request, body)

    async def _perform(self, action: Action, request: web.Request, body: bytes) -> web.StreamResponse:
        match action:
            case Forward():
                return await self._forward(request, body)
            case Respond():
                return self._respond(action, request, body)
            case WatchError():
                return self._watch_error(action)
            case Hang():
                await asyncio.sleep(_HANG_SECONDS)  # cancelled when the client leaves or we stop
                raise web.HTTPGatewayTimeout()
            case Reset(after_forward=after):
                if after:
                    await self._forward(request, body, drain_only=True)
                return await self._abort(request)
            case Cut(after_bytes=limit):
                return await self._forward(request, body, cut_after=limit)
            case Delay(seconds=seconds, then=then, after_forward=False):
                await asyncio.sleep(seconds)
                return await self._perform(then, request, body)
            case Delay(seconds=seconds, after_forward=True):
                return await self._forward(request, body, response_delay=seconds)
        raise AssertionError(f"unknown action {action!r}")  # pragma: no cover

    @staticmethod
    async def _cut(
        request: web.Request, response: web.StreamResponse, upstream: aiohttp.ClientResponse, *, limit: int
    ) -> web.StreamResponse:
        """Pass at most ``limit`` body bytes on, then drop the client's connection."""
        sent = 0
        with contextlib.suppress(ConnectionResetError, aiohttp.ClientConnectionResetError):
            while sent < limit:
                chunk = await upstream.content.read(limit - sent)
                if not chunk:
                    break
                await response.write(chunk)
                sent += len(chunk)
            await asyncio.sleep(0.05)  # Let what was written reach the client before the drop.
        if request.transport is not None:
            request.transport.abort()
        return response

    @staticmethod
    async def _abort(request: web.Request) -> web.StreamResponse:
        transport = request.transport
        if transport is not None:
            transport.abort()
        # connection_lost cancels this handler (handler_cancellation=True); wait for it.
        await asyncio.sleep(_HANG_SECONDS)
        raise ConnectionResetError("aborted by the fault proxy")

    def _respond(self, action: Respond, request: web.Request, body: bytes) -> web.Response:
        headers: CIMultiDict[str] = CIMultiDict({"Content-Type": "application/json"})
        if action.status == 429 and action.retry_after is not None:
            headers["Retry-After"] = str(action.retry_after)
        headers.update(action.headers)
        if isinstance(action.body, bytes):
            payload = action.body
        elif action.body is not None:
            payload = json.dumps(action.body).encode()
        else:
            status = kubernetes_status(
                code=action.status,
                method=request.method,
                path=request.path,
                query=unquote(request.rel_url.raw_query_string),
                request_body=body,
                reason=action.reason,
                message=action.message,
                details=action.details,
                retry_after=action.retry_after,
            )
            payload = json.dumps(status).encode()
        return web.Response(status=action.status, body=payload, headers=headers)

    @staticmethod
    def _watch_error(action: WatchError) -> web.Response:
        status = kubernetes_status(code=action.code, reason=action.reason, message=action.message)
        status.pop("details", None)
        event = json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"
        return web.Response(status=200, body=event, headers={"Content-Type": "application/json"})

    async def _forward(
        self,
        request: web.Request,
        body: bytes,
        *,
        response_delay: float = 0.0,
        drain_only: bool = False,
        cut_after: int | None = None,
    ) -> web.StreamResponse:
        session = self._session
        if session is None:
            raise web.HTTPServiceUnavailable(text="fault proxy is stopping")
        target = URL(str(self._upstream) + request.raw_path, encoded=True)
        headers = _strip(request.headers.items(), _NOT_FORWARDED_UP)
        try:
            upstream = await session.request(
                request.method,
                target,
                headers=headers,
                data=body if body else None,
                allow_redirects=False,
                compress=False,
            )
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            return self._respond(
                Respond(status=503, message=f"fault proxy: upstream unreachable: {exc!r}"), request, body
            )
        async with upstream:
            if drain_only:
                await upstream.read()
                return web.Response(status=204)  # never sent: the caller aborts the transport
            if response_delay > 0:
                await asyncio.sleep(response_delay)
            response = web.StreamResponse(
                status=upstream.status,
                reason=upstream.reason,
                headers=_strip(upstream.headers.items(), _NOT_FORWARDED_DOWN),
            )
            length = upstream.content_length
            chunked = "chunked" in upstream.headers.get("Transfer-Encoding", "").lower()
            if length is not None and not chunked:
                response.content_length = length
            elif request.method != "HEAD" and upstream.status not in (204, 304):
                response.enable_chunked_encoding()
            try:
                await response.prepare(request)
            except (ConnectionResetError, aiohttp.ClientConnectionResetError):
                return response  # The client went away while the answer was on its way (a killed operator).
            if cut_after is not None:
                return await self._cut(request, response, upstream, limit=cut_after)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except aiohttp.ClientPayloadError:
                # The upstream broke off mid-body: break the client's connection the same way.
                if request.transport is not None:
                    request.transport.abort()
                return response
            except (ConnectionResetError, aiohttp.ClientConnectionResetError):
                return response  # The client went away mid-stream (a watch it stopped): nothing to do.
            return response
