"""How long a 429 holds back the clients' transport: its Retry-After in seconds, within the cap."""

from __future__ import annotations

import pytest

from agentihooks_swarm.kubernetes import transport


@pytest.mark.parametrize(
    ("header", "held"),
    [
        ({"Retry-After": "2"}, 2.0),
        ({"Retry-After": "0.5"}, 0.5),
        ({}, transport.HOLD_DEFAULT_SECONDS),
        ({"Retry-After": ""}, transport.HOLD_DEFAULT_SECONDS),
        ({"Retry-After": "Wed, 02 Dec 2026 01:00:00 GMT"}, transport.HOLD_DEFAULT_SECONDS),
        ({"Retry-After": "600"}, transport.HOLD_CAP_SECONDS),
        ({"Retry-After": "-3"}, 0.0),
    ],
)
def test_the_hold_is_the_retry_after_in_seconds_within_the_cap(header: dict[str, str], held: float) -> None:
    assert transport.retry_after(header) == held
