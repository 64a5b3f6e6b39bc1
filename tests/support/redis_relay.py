"""A TCP relay on loopback that can hold its traffic: a replication link that falls behind.

A replica started with ``--replicaof 127.0.0.1 <relay.port>`` replicates through the relay. While
:meth:`Relay.hold` is in force nothing is forwarded (bytes wait in the kernel's buffers, both
connections stay open), so the primary acknowledges writes the replica does not have, and the
replica still reports its link as up: Sentinel will promote it, with the writes missing.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.support.redis_server import free_port
from tests.support.started import Started


class Relay(Started):
    def __init__(self, *, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.upstream_port = upstream_port
        self.port = free_port(host=host)
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(16)
        listener.settimeout(0.2)
        self._listener = listener
        threading.Thread(target=self._accept, name=f"relay-{self.port}", daemon=True).start()

    def hold(self) -> None:
        """Stop forwarding in both directions (connections stay open)."""
        self._flowing.clear()

    def release(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        if self._listener is not None:
            sockets.append(self._listener)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                downstream, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.host, self.upstream_port), timeout=5)
            except OSError:
                downstream.close()
                continue
            upstream.settimeout(None)
            downstream.settimeout(None)
            with self._lock:
                self._sockets += [downstream, upstream]
            for source, target in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                self._flowing.wait()
                data = source.recv(65536)
                if not data:
                    break
                self._flowing.wait()  # Read while flowing, held before it is passed on.
                if self._closed.is_set():
                    break
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
