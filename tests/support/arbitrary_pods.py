"""Arbitrary Pod statuses and log bytes (hypothesis strategies), and a log source that serves given
bytes, for the property tests of the capture (in ``tests/unit``, and through the real Redis in
``tests/integration``)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from agentihooks_swarm.kubernetes import logs, pods

LIMIT = pods.LOG_LIMIT_BYTES

log_bytes = st.one_of(
    st.binary(max_size=4096),
    st.lists(
        st.sampled_from(
            [b"\n", b"\r", b"\x00", b"\x1b[31m", b"\xff", b"\xc3", b"\xe2\x82", b"ok ", b"\xf0\x9f\x92\xa5"]
        ),
        max_size=2000,
    ).map(b"".join),
)


# What JSON from the API server can hold: no NaN and no infinity (Go's encoder refuses both, and
# pydantic writes them as null, so a record holding one would not read back the same).
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)


json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


terminated_states = st.fixed_dictionaries(
    {},
    optional={
        "exitCode": st.one_of(st.integers(min_value=-(2**31), max_value=2**31 - 1), json_scalars),
        "signal": st.integers(min_value=0, max_value=64),
        "reason": st.text(max_size=30),
        "message": st.text(max_size=200),
        "startedAt": st.text(max_size=25),
        "finishedAt": st.text(max_size=25),
        "containerID": st.text(max_size=40),
        "somethingNew": json_values,
    },
)


container_status = st.one_of(
    st.fixed_dictionaries(
        {"name": st.text(min_size=1, max_size=20)},
        optional={"state": st.one_of(st.fixed_dictionaries({"terminated": terminated_states}), json_values)},
    ),
    json_values,
)


pod_status = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "phase": st.one_of(
                st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"]), json_values
            ),
            "reason": st.one_of(st.text(max_size=30), json_values),
            "containerStatuses": st.one_of(st.lists(container_status, max_size=3), json_values),
            "initContainerStatuses": st.one_of(st.lists(container_status, max_size=3), json_values),
        },
    ),
    json_values,
)


class Logs:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    async def pod_logs(self, *, namespace: str, name: str, container: str) -> logs.LogRead:
        return logs.fit(self.raw, limit=LIMIT)

    async def pod_events(self, *, namespace: str, uid: str) -> list[dict[str, Any]]:
        return []
