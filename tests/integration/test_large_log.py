"""A log whose first read fills 64 KiB is read a second time, streamed and without a byte limit, to
keep its newest lines. On the real API server (kwok serves the planted log) through the fault
proxy: when that second read fails, the first read's answer is the capture, never a lost read."""

from __future__ import annotations

from typing import Final

import pytest

from agentihooks_swarm import store as store_
from agentihooks_swarm.kubernetes import pods as pod_client
from tests.support.fixtures_rig import Rig
from tests.support.proxy import Delay

pytestmark = pytest.mark.integration

#: The client timeout of the runtime under test.
TIMEOUT: Final = 3.0
#: 200 lines (the tail read's whole length) of about 205 KiB each: 40 MiB.
LINE_BYTES: Final = 40 * 1024 * 1024 // 200 + 1
#: The second read: the same tail without ``limitBytes``.
SECOND_READ: Final = r"^(?!.*limitBytes)"


def forty_mib() -> bytes:
    lines = [f"line {i:03d} ".encode() for i in range(200)]
    return b"".join(line + b"x" * (LINE_BYTES - len(line) - 1) + b"\n" for line in lines)


async def test_a_40_mib_log_whose_second_read_times_out_keeps_the_first_reads_64_kib(rig: Rig) -> None:
    content = forty_mib()
    assert len(content) >= 40 * 1024 * 1024
    attempt = await rig.attempt()
    pod = await rig.plant(attempt, exit_code=78, log=content)
    # The API server sends the 40 MiB, but not within the client's timeout.
    late = rig.proxy.add_rule(
        method="GET",
        path=r".*/pods/[^/]+/log$",
        query=SECOND_READ,
        action=Delay(seconds=TIMEOUT + 2, after_forward=True),
        times=None,
    )
    rig.proxy.reset_counts()

    async with rig.runtime(timeout=TIMEOUT) as runtime:
        await rig.cleanup(runtime, attempt)
        failures = sum(
            runtime.metrics.log_read_failures.labels(path="cleanup", cause=cause)._value.get()
            for cause in ("refused", "node_unreachable", "unavailable", "timeout")
        )

    reads = rig.proxy.matching_calls(path=r".*/log$")
    assert len(reads) == 2 and late.hits == 1
    assert "limitBytes=65536" in reads[0].query and "limitBytes" not in reads[1].query
    assert failures == 0
    [entry] = await rig.removed_pods(attempt)
    assert (entry["uid"], entry["outcome"]) == (pod["metadata"]["uid"], "deleted")
    assert "log_reads" not in entry  # No failed read was counted.
    [container] = entry["startup"]["containers"]
    assert container["log_truncated"] is True and "log_error" not in container
    log = container["log"].encode()
    assert len(log) == pod_client.LOG_LIMIT_BYTES  # The first read's answer, whole.
    first_line = log.split(b"\n", 1)[0]
    assert first_line.split(b" ", 1)[1].startswith(b"line 000 xxx")  # The oldest of the 200.
    await rig.gone(attempt)
    assert await rig.store.redis.hget(rig.store.key(attempt.slug, store_.JOURNAL), attempt.execution) is None
