"""Just enough RESP (Redis' wire format) to rewrite the addresses a Sentinel hands out.

:class:`AddressRewriter` is fed the byte stream a Sentinel sends back to a client and returns the
same replies with every server port in its map replaced: in a reply that lists fields (``SENTINEL
MASTERS``, ``SENTINEL REPLICAS``: ``… "ip" "127.0.0.1" "port" "6380" …``) the value after a
``port`` field, and in the two-element answer of ``SENTINEL GET-MASTER-ADDR-BY-NAME`` the port
after the address. Everything else passes unchanged. Replies may arrive cut anywhere: a reply is
passed on once it is complete.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

_LINE_TYPES: Final = frozenset(b"+-:_,#(")
_BULK_TYPES: Final = frozenset(b"$=!")
_AGGREGATE_TYPES: Final = frozenset(b"*~>")
_MAP_TYPES: Final = frozenset(b"%|")


class ProtocolError(ValueError):
    """The stream is not RESP."""


@dataclass(frozen=True)
class Value:
    """One RESP value: its type byte and either its line/bulk payload or its elements."""

    kind: int
    payload: bytes | None = None
    items: tuple[Value, ...] | None = None

    def encode(self) -> bytes:
        marker = bytes([self.kind])
        if self.kind in _LINE_TYPES:
            return marker + (self.payload or b"") + b"\r\n"
        if self.kind in _BULK_TYPES:
            if self.payload is None:
                return marker + b"-1\r\n"
            return marker + str(len(self.payload)).encode() + b"\r\n" + self.payload + b"\r\n"
        if self.items is None:
            return marker + b"-1\r\n"
        count = len(self.items) // 2 if self.kind in _MAP_TYPES else len(self.items)
        return marker + str(count).encode() + b"\r\n" + b"".join(item.encode() for item in self.items)


def parse(buffer: bytes | bytearray, start: int = 0) -> tuple[Value, int] | None:
    """The value at ``start`` and where it ends, or None when the buffer holds only part of it."""
    if start >= len(buffer):
        return None
    kind = buffer[start]
    end = buffer.find(b"\r\n", start)
    if end < 0:
        return None
    header = bytes(buffer[start + 1 : end])
    if kind in _LINE_TYPES:
        return Value(kind, payload=header), end + 2
    try:
        length = int(header)
    except ValueError as e:
        raise ProtocolError(f"not a RESP length: {header!r}") from e
    if kind in _BULK_TYPES:
        if length < 0:
            return Value(kind), end + 2
        if len(buffer) < end + 2 + length + 2:
            return None
        return Value(kind, payload=bytes(buffer[end + 2 : end + 2 + length])), end + 2 + length + 2
    if kind in _AGGREGATE_TYPES or kind in _MAP_TYPES:
        if length < 0:
            return Value(kind), end + 2
        count = length * 2 if kind in _MAP_TYPES else length
        items: list[Value] = []
        at = end + 2
        for _ in range(count):
            parsed = parse(buffer, at)
            if parsed is None:
                return None
            item, at = parsed
            items.append(item)
        return Value(kind, items=tuple(items)), at
    raise ProtocolError(f"unknown RESP type byte {kind!r}")


def _text(value: Value) -> bytes | None:
    return value.payload if value.kind in _BULK_TYPES or value.kind in _LINE_TYPES else None


def rewrite(value: Value, ports: Mapping[int, int]) -> Value:
    """``value`` with every mapped server port replaced (see the module docstring)."""
    if value.items is None:
        return value
    items = [rewrite(item, ports) for item in value.items]
    for index in range(len(items) - 1):
        if _text(items[index]) == b"port":
            items[index + 1] = _mapped(items[index + 1], ports)
    if len(items) == 2 and _text(items[0]) not in (None, b"port") and b"." in (_text(items[0]) or b""):
        items[1] = _mapped(items[1], ports)  # GET-MASTER-ADDR-BY-NAME: [ip, port]
    return Value(value.kind, items=tuple(items))


def _mapped(value: Value, ports: Mapping[int, int]) -> Value:
    text = _text(value)
    if text is None or not text.isdigit() or int(text) not in ports:
        return value
    return Value(value.kind, payload=str(ports[int(text)]).encode())


class AddressRewriter:
    """Feed it a Sentinel's replies as they arrive; it returns them, complete and rewritten."""

    def __init__(self, ports: Mapping[int, int]) -> None:
        self._ports = dict(ports)
        self._buffer = bytearray()

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out: list[bytes] = []
        while True:
            parsed = parse(self._buffer)
            if parsed is None:
                break
            value, end = parsed
            out.append(rewrite(value, self._ports).encode())
            del self._buffer[:end]
        return b"".join(out)
