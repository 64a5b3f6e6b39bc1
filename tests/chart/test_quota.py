"""The chart's share of the swarms' byte quota and of Redis's room: the quota reaches the controller
as a whole number of bytes, and the bundled Redis's memory limit leaves room for the fork of an AOF
rewrite above its maxmemory."""

from __future__ import annotations

import re

import pytest

from agentihooks_swarm import settings
from tests.chart.conftest import Chart, RenderError

QUOTA = "AGENTIHOOKS_SWARM_SWARM_QUOTA_BYTES"
#: Redis's own units (redis.conf: 1mb = 1024*1024 bytes) and Kubernetes' binary ones.
REDIS_UNITS = {"b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}
QUANTITY_UNITS = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "K": 1000, "M": 1000**2, "G": 1000**3, "": 1}


def redis_bytes(value: str) -> int:
    found = re.fullmatch(r"(\d+)([a-z]*)", value.lower())
    assert found is not None, value
    return int(found[1]) * REDIS_UNITS[found[2] or "b"]


def quantity_bytes(value: str) -> int:
    found = re.fullmatch(r"(\d+)([A-Za-z]*)", value)
    assert found is not None, value
    return int(found[1]) * QUANTITY_UNITS[found[2]]


def test_the_quota_reaches_the_controller_as_a_whole_number_of_bytes(chart: Chart) -> None:
    env = chart.render().env()
    assert env[QUOTA]["value"] == "67108864"  # Not 6.7108864e+07, as a float this large prints.
    assert settings.Settings.from_env({QUOTA: env[QUOTA]["value"]}).swarm_quota_bytes == 64 * 1024**2
    for bound in (0, 1, 10 * 1024**3):
        assert chart.render({"redis": {"swarmQuotaBytes": bound}}).env()[QUOTA]["value"] == str(bound)
    for wrong in (-1, 1.5, "64Mi"):
        with pytest.raises(RenderError, match="swarmQuotaBytes"):
            chart.render({"redis": {"swarmQuotaBytes": wrong}})


def test_the_bundled_redis_has_room_for_its_aof_rewrite_and_a_swarm_cannot_fill_it(chart: Chart) -> None:
    statefulset = chart.render().one("StatefulSet", "rel-redis")
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    config, *args = container["args"]  # The config file with the password, then the options.
    assert config == "/config/auth.conf"
    flags = dict(zip(args[::2], args[1::2], strict=True))
    assert flags["--appendonly"] == "yes"
    maxmemory = redis_bytes(flags["--maxmemory"])
    limit = quantity_bytes(container["resources"]["limits"]["memory"])
    # The rewrite forks: while the child writes the data out, each page the parent changes is
    # copied, so Redis may briefly need its data twice over.
    assert 2 * maxmemory <= limit, (maxmemory, limit)
    # Three swarms at their quota still leave the others room.
    assert 3 * settings.Settings().swarm_quota_bytes <= maxmemory
