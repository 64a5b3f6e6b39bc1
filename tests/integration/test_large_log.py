"""A log whose first read fills 64 KiB is read a second time, streamed and without a byte limit, to
keep its newest lines. On the real API server (kwok serves the planted log) through the fault
proxy: when that second read fails, the first read's answer is the capture, never a lost read."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm import store as store_
from agentihooks_swarm.kubernetes import pods as pod_client
from agentihooks_swarm.storage import operations
from tests.support.cleanup_passes import gone, retained_of, run_pass
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import RuntimeFactory
from tests.support.planting import attempt_for, plant_pod
from tests.support.proxy import Delay, FaultProxy

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


async def test_a_40_mib_log_whose_second_read_times_out_keeps_the_first_reads_64_kib(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    fault_proxy: FaultProxy,
    runtime_for: RuntimeFactory,
    store: operations.AsyncStore,
    tmp_path: Path,
) -> None:
    content = forty_mib()
    assert len(content) >= 40 * 1024 * 1024
    attempt = attempt_for(namespace)
    pod = await plant_pod(admin_api, control_plane, attempt=attempt, exit_code=78, log=content)
    kubeconfig = fault_proxy.kubeconfig(token=control_plane.admin_token, path=tmp_path / "proxy.kubeconfig")
    # The API server sends the 40 MiB, but not within the client's timeout.
    late = fault_proxy.add_rule(
        method="GET",
        path=r".*/pods/[^/]+/log$",
        query=SECOND_READ,
        action=Delay(seconds=TIMEOUT + 2, after_forward=True),
        times=None,
    )
    fault_proxy.reset_counts()

    async with runtime_for(kubeconfig, timeout=TIMEOUT) as runtime:
        await run_pass(runtime, store, attempt)
        failures = sum(
            runtime.metrics.log_read_failures.labels(path="cleanup", cause=cause)._value.get()
            for cause in ("refused", "node_unreachable", "unavailable", "timeout")
        )

    reads = fault_proxy.matching_calls(path=r".*/log$")
    assert len(reads) == 2 and late.hits == 1
    assert "limitBytes=65536" in reads[0].query and "limitBytes" not in reads[1].query
    assert failures == 0
    [entry] = (await retained_of(store, attempt))["removed"]["pods"]
    assert (entry["uid"], entry["outcome"]) == (pod["metadata"]["uid"], "deleted")
    assert "log_reads" not in entry  # No failed read was counted.
    [container] = entry["startup"]["containers"]
    assert container["log_truncated"] is True and "log_error" not in container
    log = container["log"].encode()
    assert len(log) == pod_client.LOG_LIMIT_BYTES  # The first read's answer, whole.
    first_line = log.split(b"\n", 1)[0]
    assert first_line.split(b" ", 1)[1].startswith(b"line 000 xxx")  # The oldest of the 200.
    await gone(admin_api, namespace, attempt.pod_name)
    assert await store.redis.hget(store.key(attempt.slug, store_.JOURNAL), attempt.execution) is None
