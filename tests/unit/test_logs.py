"""The log fitting rules: newest complete lines, the byte cap, invalid UTF-8 replaced."""

from __future__ import annotations

from agentihooks_swarm.kubernetes import logs

LIMIT = 64 * 1024


def test_small_log_is_kept_whole() -> None:
    read = logs.fit(b"2026-10-19T08:00:01Z worker startup refused\n", limit=LIMIT)
    assert read == logs.LogRead(text="2026-10-19T08:00:01Z worker startup refused\n", truncated=False)


def test_invalid_utf8_is_replaced() -> None:
    read = logs.fit(b"bad \xff\xfe bytes\n", limit=LIMIT)
    assert read.text == "bad \ufffd\ufffd bytes\n"
    assert read.truncated is False


def test_too_long_keeps_newest_complete_lines() -> None:
    lines = [f"line {i:04d} ".encode() + b"x" * 1000 + b"\n" for i in range(200)]
    read = logs.fit(b"".join(lines), limit=LIMIT)
    assert read.truncated is True
    assert len(read.text.encode()) <= LIMIT
    assert read.text.endswith(lines[-1].decode())
    first = read.text.split("\n")[0]
    assert first.startswith("line ")  # A whole line, not a fragment.
    kept = read.text.count("\n")
    assert kept == LIMIT // len(lines[0])  # As many whole newest lines as fit.


def test_one_line_longer_than_the_limit_keeps_its_newest_bytes() -> None:
    line = b"start" + b"y" * (200 * 1024) + b"the end\n"
    read = logs.fit(line, limit=LIMIT)
    assert read.truncated is True
    assert read.text.endswith("the end\n")
    assert len(read.text.encode()) == LIMIT


def test_replacement_growth_still_respects_the_limit() -> None:
    raw = b"\xff" * (LIMIT - 10) + b"\nlast line\n"  # Each bad byte becomes 3 bytes of U+FFFD.
    read = logs.fit(raw, limit=LIMIT)
    assert len(read.text.encode()) <= LIMIT
    assert read.text.endswith("last line\n")
    assert read.truncated is True


def test_partial_first_line_is_dropped() -> None:
    read = logs.fit(b"ment of an old line\nnew line\n", limit=LIMIT, partial_first_line=True)
    assert read == logs.LogRead(text="new line\n", truncated=True)


def test_window_keeps_the_newest_bytes_and_knows_line_starts() -> None:
    window = logs.Window(limit=10)
    window.feed(b"aaaa\nbbbb\n")
    assert window.starts_at_line is True
    window.feed(b"cccc\n")
    assert window.tail() == b"bbbb\ncccc\n"
    assert window.dropped == 5
    assert window.starts_at_line is True
    window.feed(b"dd")
    assert window.tail() == b"bb\ncccc\ndd"
    assert window.starts_at_line is False
