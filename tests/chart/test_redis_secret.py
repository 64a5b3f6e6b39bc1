"""The bundled Redis's password: never on a command line (an init container writes it into a
config file in memory, which a real redis-server then reads), a checksum of it on the Redis and
controller Pods so a new one rolls both, redis.existingSecret instead of the chart's own, and the
TLS settings of an external Redis."""

from __future__ import annotations

import base64
import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.chart.conftest import RELEASE, Chart, Object, Rendered
from tests.support.redis_server import RedisServer

SECRET = f"{RELEASE}-redis"


def template(workload: Object) -> Object:
    spec: Object = workload["spec"]["template"]
    return spec


def checksums(rendered: Rendered) -> tuple[str | None, str | None]:
    """The checksum/redis-password of the Redis Pod and of the controller Pod."""
    pods = (rendered.one("StatefulSet", SECRET), rendered.one("Deployment", f"{RELEASE}-controller"))
    return tuple(  # type: ignore[return-value]
        (template(p)["metadata"].get("annotations") or {}).get("checksum/redis-password") for p in pods
    )


def test_the_password_is_in_a_config_file_never_on_a_command_line(chart: Chart) -> None:
    spec = template(chart.render().one("StatefulSet", SECRET))["spec"]
    (init,) = spec["initContainers"]
    (server,) = spec["containers"]
    assert "env" not in server
    assert not any("requirepass" in arg or "REDIS_PASSWORD" in arg for arg in server["args"])
    assert server["args"][0] == "/config/auth.conf"
    assert init["env"] == [
        {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "password"}}}
    ]
    assert {"name": "config", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in spec["volumes"]


@pytest.mark.parametrize("password", ["plain32Alnum0123456789abcdefABCDEF", "q\"uo\\te $HOME `x` 's"])
def test_the_written_config_is_what_a_real_redis_server_reads(
    chart: Chart, tmp_path: Path, password: str
) -> None:
    """The init container's script, run by sh with /config in a temporary folder; redis-server
    then asks for exactly that password, and its command line does not hold it."""
    (init,) = template(chart.render().one("StatefulSet", SECRET))["spec"]["initContainers"]
    assert init["command"] == ["sh", "-c"]
    script = init["args"][0].replace("/config/", f"{tmp_path}/")
    subprocess.run(
        ["sh", "-c", script], env={"REDIS_PASSWORD": password, "PATH": "/usr/bin:/bin"}, check=True
    )
    config = tmp_path / "auth.conf"
    assert config.stat().st_mode & 0o077 == 0
    with RedisServer(config_file=config) as server:
        assert server.pid is not None
        assert password.encode() not in Path(f"/proc/{server.pid}/cmdline").read_bytes()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=server.port).ping()
        assert redis.Redis(port=server.port, password=password).ping() is True


def test_one_checksum_of_the_generated_password_on_both_pods(chart: Chart) -> None:
    rendered = chart.render()
    password = base64.b64decode(rendered.one("Secret", SECRET)["data"]["password"])
    expected = hashlib.sha256(password).hexdigest()
    assert checksums(rendered) == (expected, expected)


def test_an_existing_secret_replaces_the_charts_own(chart: Chart) -> None:
    values: dict[str, Any] = {"redis": {"existingSecret": "my-redis"}, "podAnnotations": {"a": "b"}}
    rendered = chart.render(values)
    assert rendered.find("Secret", SECRET) is None
    reference = {"secretKeyRef": {"name": "my-redis", "key": "password"}}
    assert rendered.env()["AGENTIHOOKS_SWARM_REDIS_PASSWORD"]["valueFrom"] == reference
    (init,) = template(rendered.one("StatefulSet", SECRET))["spec"]["initContainers"]
    assert init["env"][0]["valueFrom"] == reference
    # The chart never sees that password: a rotation is a rollout (docs/security.md).
    assert checksums(rendered) == (None, None)
    annotations = template(rendered.one("Deployment", f"{RELEASE}-controller"))["metadata"]["annotations"]
    assert annotations == {"a": "b"}


@pytest.mark.parametrize(
    ("tls", "expected"),
    [
        ({}, (None, "true")),
        ({"enabled": True}, ("true", "true")),
        ({"checkHostname": False}, (None, "false")),
    ],
)
def test_external_tls_settings(chart: Chart, tls: dict[str, Any], expected: tuple[str | None, str]) -> None:
    external = {"topology": "sentinel", "sentinel": {"addresses": ["s:26379"]}, "tls": tls}
    env = chart.render({"redis": {"mode": "external", "external": external}}).env()
    got = tuple(
        env[name]["value"] if name in env else None
        for name in ("AGENTIHOOKS_SWARM_REDIS_TLS", "AGENTIHOOKS_SWARM_REDIS_TLS_CHECK_HOSTNAME")
    )
    assert got == expected
