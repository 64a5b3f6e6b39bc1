"""The network between each operator replica and Redis, where a partition can be cut.

Why this shape: a partition must cut one operator off Redis while the Sentinels still reach the
servers (else Sentinel would fail the primary over and the fault would be a different one). So
the Sentinels and the replication links use the servers' real ports, and only the operators go
through proxies, each replica through its own set:

* one TCP proxy per server and replica (``operator a`` → server 1 goes through a's proxy for
  server 1);
* one proxy per Sentinel and replica, which rewrites the Sentinel's answers
  (:mod:`tests.soak.resp`): where a Sentinel names a server's real port, the replica reads the port
  of its own proxy for that server. So redis-py's Sentinel client, asking "who is the primary",
  connects to the primary through the replica's proxies, and follows a failover the same way.

:meth:`RedisNet.partition` holds every proxy of one replica: nothing is forwarded either way and
new connections are accepted but never reach Redis, as when packets are dropped (the client times
out; bytes sent meanwhile are delivered once the partition heals, as TCP would). The Sentinels'
own view of the servers is never touched. Everything runs on one event loop in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from tests.soak.resp import AddressRewriter, ProtocolError

HOST = "127.0.0.1"
_T = TypeVar("_T")


class RedisNet:
    def __init__(self, *, servers: Sequence[int], sentinels: Sequence[int], clients: Sequence[str]) -> None:
        self._server_ports = list(servers)
        self._sentinel_ports = list(sentinels)
        self._clients = list(clients)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="redis-net", daemon=True)
        self._gates: dict[str, asyncio.Event] = {}
        self._listeners: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        #: client -> real server port -> that client's proxy port.
        self.server_proxies: dict[str, dict[int, int]] = {}
        #: client -> that client's Sentinel proxy ports.
        self.sentinel_proxies: dict[str, list[int]] = {}

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> RedisNet:
        self._thread.start()
        self._call(self._open)
        return self

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call(self._shut)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> RedisNet:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- what the operators are given, and the fault ------------------------------------------

    def sentinel_addresses(self, client: str) -> str:
        """``AGENTIHOOKS_SWARM_REDIS_SENTINELS`` for ``client``: its proxies of the Sentinels."""
        return ",".join(f"{HOST}:{port}" for port in self.sentinel_proxies[client])

    def partition(self, client: str) -> None:
        """Cut ``client`` off Redis (and the Sentinels) until :meth:`heal`."""
        self._loop.call_soon_threadsafe(self._gates[client].clear)

    def heal(self, client: str) -> None:
        self._loop.call_soon_threadsafe(self._gates[client].set)

    def partitioned(self, client: str) -> bool:
        return not self._gates[client].is_set()

    # -- inside the loop ----------------------------------------------------------------------

    def _call(self, make: Callable[[], Awaitable[_T]]) -> _T:
        async def run() -> _T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    async def _open(self) -> None:
        for client in self._clients:
            gate = self._gates[client] = asyncio.Event()
            gate.set()
            proxies: dict[int, int] = {}
            for port in self._server_ports:
                proxies[port] = await self._listen(upstream=port, gate=gate, ports=None)
            self.server_proxies[client] = proxies
            self.sentinel_proxies[client] = [
                await self._listen(upstream=port, gate=gate, ports=proxies) for port in self._sentinel_ports
            ]

    async def _listen(self, *, upstream: int, gate: asyncio.Event, ports: Mapping[int, int] | None) -> int:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._handlers.add(task)
            try:
                await self._connection(reader, writer, upstream=upstream, gate=gate, ports=ports)
            except asyncio.CancelledError:
                pass  # Closed by _shut; ending normally spares asyncio's callback a cancelled task.
            finally:
                self._handlers.discard(task)

        server = await asyncio.start_server(handle, HOST, 0)
        self._listeners.append(server)
        port: int = server.sockets[0].getsockname()[1]
        return port

    async def _connection(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        upstream: int,
        gate: asyncio.Event,
        ports: Mapping[int, int] | None,
    ) -> None:
        self._writers.add(writer)
        try:
            await gate.wait()  # A partition: the connection is accepted and goes nowhere.
            try:
                up_reader, up_writer = await asyncio.open_connection(HOST, upstream)
            except OSError:
                return  # The server is down: the client sees its connection closed.
            self._writers.add(up_writer)
            rewriter = AddressRewriter(ports) if ports is not None else None
            await asyncio.gather(
                _pump(reader, up_writer, gate=gate, rewriter=None),
                _pump(up_reader, writer, gate=gate, rewriter=rewriter),
                return_exceptions=True,
            )
            self._writers.discard(up_writer)
            _close(up_writer)
        finally:
            self._writers.discard(writer)
            _close(writer)

    async def _shut(self) -> None:
        for server in self._listeners:
            server.close()
        for writer in list(self._writers):
            _close(writer)
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*list(self._handlers), return_exceptions=True)
        for server in self._listeners:
            await server.wait_closed()


async def _pump(
    source: asyncio.StreamReader,
    target: asyncio.StreamWriter,
    *,
    gate: asyncio.Event,
    rewriter: AddressRewriter | None,
) -> None:
    try:
        while True:
            await gate.wait()
            data = await source.read(65536)
            if not data:
                break
            await gate.wait()  # Read while flowing, held before it is passed on.
            if rewriter is not None:
                data = rewriter.feed(data)
            if data:
                target.write(data)
                await target.drain()
    except (OSError, ProtocolError):
        pass
    finally:
        _close(target)


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()
