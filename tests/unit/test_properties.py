"""Property-based tests of the capture and record code: arbitrary bytes as logs, arbitrary Pod
statuses. The capture never raises, never exceeds its caps, and its records round-trip."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import example, given, settings, strategies as st

from agentihooks_swarm import records
from agentihooks_swarm.capture import diagnostics
from agentihooks_swarm.kubernetes import logs
from tests.support.arbitrary_pods import LIMIT, Logs, log_bytes, pod_status


@given(raw=log_bytes, limit=st.integers(min_value=1, max_value=8192), partial=st.booleans())
@example(raw=b"\x00\x1b[2Jclear\rcr only\rlines\r", limit=8, partial=False)
def test_fit_never_exceeds_the_limit_and_keeps_the_newest_end(raw: bytes, limit: int, partial: bool) -> None:
    read = logs.fit(raw, limit=limit, partial_first_line=partial)
    assert len(read.text.encode("utf-8")) <= limit
    decoded = raw.decode("utf-8", errors="replace")
    assert decoded.endswith(read.text)  # Only older bytes are ever dropped.
    if not partial and len(decoded.encode()) <= limit:
        assert (read.text, read.truncated) == (decoded, False)
    if read.text != decoded:
        assert read.truncated


@given(chunks=st.lists(st.binary(max_size=300), max_size=50), limit=st.integers(min_value=1, max_value=1000))
def test_window_keeps_exactly_the_newest_bytes(chunks: list[bytes], limit: int) -> None:
    window = logs.Window(limit=limit)
    for chunk in chunks:
        window.feed(chunk)
    data = b"".join(chunks)
    assert window.tail() == data[-limit:] if data else window.tail() == b""
    assert window.dropped == max(0, len(data) - limit)
    if window.dropped:
        assert window.starts_at_line == (data[len(data) - limit - 1 : len(data) - limit] == b"\n")


def test_one_ten_mebibyte_line() -> None:
    read = logs.fit(b"x" * (10 * 1024 * 1024) + b" the end\n", limit=LIMIT)
    assert read.truncated and read.text.endswith(" the end\n") and len(read.text.encode()) == LIMIT


def test_a_hundred_thousand_short_lines() -> None:
    raw = b"".join(b"line %d\n" % i for i in range(100_000))
    read = logs.fit(raw, limit=LIMIT)
    assert read.truncated and read.text.endswith("line 99999\n") and read.text.startswith("line ")
    assert len(read.text.encode()) <= LIMIT


@settings(max_examples=300)
@given(status=pod_status, raw=log_bytes)
def test_capture_never_raises_and_round_trips(status: Any, raw: bytes) -> None:
    pod = {"metadata": {"name": "p", "namespace": "n", "uid": "u"}, "status": status}
    capture = asyncio.run(diagnostics.startup(pod, Logs(raw)))
    if capture is None:
        assert not diagnostics.is_refused(pod)
        return
    assert diagnostics.is_refused(pod)
    for container in capture.containers:
        assert len((container.log or "").encode()) <= LIMIT
    record = records.StartupRecord(pod="p", uid="u", labels={}, startup=capture)
    dumped = records.dump(record)
    assert records.load(records.StartupRecord, dumped) == record
    assert json.loads(dumped)["startup"]["phase"] == capture.phase
