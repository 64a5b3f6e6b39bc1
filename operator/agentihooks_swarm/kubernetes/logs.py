"""Fitting a container's log tail into the stored record: pure functions, no I/O.

The stored log is at most ``limit`` bytes of UTF-8. When the tail is bigger, the *newest* complete
lines are kept (a worker's refusal is its last words); when even the newest line alone is bigger,
its newest ``limit`` bytes are kept. Bytes that are not valid UTF-8 are replaced with U+FFFD, and
the limit holds after that replacement too.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogRead:
    """A container's log tail as stored."""

    text: str
    #: True when older lines (or the start of an over-long line) were dropped to fit the limit.
    truncated: bool


def fit(raw: bytes, *, limit: int, partial_first_line: bool = False, truncated: bool = False) -> LogRead:
    """Decode ``raw`` and keep its newest lines within ``limit`` UTF-8 bytes.

    ``partial_first_line`` says ``raw`` starts in the middle of a line (its older part is gone):
    that fragment is dropped if a complete line follows it. ``truncated`` says older data was
    already dropped before ``raw``.
    """
    if partial_first_line:
        newline = raw.find(b"\n")
        if 0 <= newline < len(raw) - 1:
            raw = raw[newline + 1 :]
        truncated = True
    text = raw.decode("utf-8", errors="replace")
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return LogRead(text=text, truncated=truncated)
    start = len(encoded) - limit
    # The first line that starts at or after ``start`` is the oldest complete line that fits.
    newline = encoded.find(b"\n", start - 1)
    if 0 <= newline < len(encoded) - 1:
        kept = encoded[newline + 1 :]
    else:
        kept = encoded[start:]  # One line longer than the limit: keep its newest bytes.
    return LogRead(text=kept.decode("utf-8", errors="ignore"), truncated=True)


class Window:
    """The newest ``limit`` bytes of a stream, in constant memory."""

    def __init__(self, *, limit: int) -> None:
        self.limit = limit
        self.dropped = 0
        self._buffer = bytearray()
        self._before: int | None = None

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        excess = len(self._buffer) - self.limit
        if excess > 0:
            self._before = self._buffer[excess - 1]
            del self._buffer[:excess]
            self.dropped += excess

    def tail(self) -> bytes:
        return bytes(self._buffer)

    @property
    def starts_at_line(self) -> bool:
        """Whether the kept bytes start at the beginning of a line."""
        return self.dropped == 0 or self._before == ord("\n")
