"""The records reader the chart runs (docs/security.md, "Who can read the records"): one Pod with
no ServiceAccount token and a read-only Redis user of its own, a Role that lets people exec into
that Pod and nothing else, and the controller's side (the reader's password, ``--force``)."""

from __future__ import annotations

import base64
from typing import Any, Final

from agentihooks_swarm import settings
from tests.chart.conftest import NAMESPACE, RELEASE, Chart, Object, rules

POD: Final = f"{RELEASE}-records-0"
SECRET: Final = f"{RELEASE}-records-redis"


def reader_pod(rendered: Any) -> Object:
    statefulset = rendered.one("StatefulSet", f"{RELEASE}-records")
    assert statefulset["spec"]["replicas"] == 1
    spec: Object = statefulset["spec"]["template"]["spec"]
    return spec


def env_of(spec: Object) -> dict[str, Object]:
    (container,) = spec["containers"]
    return {e["name"]: e for e in container["env"]}


def test_the_reader_holds_no_token_and_only_its_own_redis_user(chart: Chart) -> None:
    rendered = chart.render()
    account = rendered.one("ServiceAccount", f"{RELEASE}-records")
    assert account["automountServiceAccountToken"] is False
    spec = reader_pod(rendered)
    assert spec["serviceAccountName"] == f"{RELEASE}-records"
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    (container,) = spec["containers"]
    assert container["name"] == "records" and container["command"][:2] == ["python", "-c"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert [v for v in spec["volumes"] if "secret" in v or "projected" in v] == []
    env = env_of(spec)
    assert set(env) == {
        "AGENTIHOOKS_SWARM_REDIS_URL",
        "AGENTIHOOKS_SWARM_REDIS_USERNAME",
        "AGENTIHOOKS_SWARM_REDIS_PASSWORD",
        "AGENTIHOOKS_SWARM_REDIS_TIMEOUT_SECONDS",
        "AGENTIHOOKS_SWARM_KEY_PREFIX",
    }
    for name, key in (
        ("AGENTIHOOKS_SWARM_REDIS_USERNAME", "username"),
        ("AGENTIHOOKS_SWARM_REDIS_PASSWORD", "password"),
    ):
        assert env[name]["valueFrom"] == {"secretKeyRef": {"name": SECRET, "key": key}}
    assert env["AGENTIHOOKS_SWARM_REDIS_URL"]["value"] == f"redis://{RELEASE}-redis.{NAMESPACE}.svc:6379/0"
    secret = rendered.one("Secret", SECRET)
    assert base64.b64decode(secret["data"]["username"]).decode() == "agentihooks-swarm-records"
    assert len(base64.b64decode(secret["data"]["password"])) == 32
    labels = rendered.one("StatefulSet", f"{RELEASE}-records")["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "records"
    # Its settings parse, and name no controller credential.
    plain = {name: e["value"] for name, e in env.items() if "value" in e}
    parsed = settings.Settings.from_env({**plain, "AGENTIHOOKS_SWARM_REDIS_USERNAME": "u"})
    assert parsed.reader_password is None and parsed.redis_username == "u"


def test_readers_may_exec_into_the_reader_pod_and_nothing_else(chart: Chart) -> None:
    rendered = chart.render()
    role = rendered.one("Role", f"{RELEASE}-records-reader")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rules(role) == {
        ("", "pods", "get", POD),
        ("", "pods/exec", "create", POD),
        ("", "pods/exec", "get", POD),
    }
    assert rendered.find("RoleBinding", f"{RELEASE}-records-reader") is None
    # The reader's ServiceAccount is bound to nothing.
    bound = [
        s
        for o in rendered.of("RoleBinding") + rendered.of("ClusterRoleBinding")
        for s in o.get("subjects") or []
    ]
    assert f"{RELEASE}-records" not in {s["name"] for s in bound}

    team = [{"kind": "Group", "name": "sre", "apiGroup": "rbac.authorization.k8s.io"}]
    binding = chart.render({"records": {"readers": team}}).one("RoleBinding", f"{RELEASE}-records-reader")
    assert binding["subjects"] == team
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": f"{RELEASE}-records-reader",
    }


def test_the_controller_makes_the_reader_user_and_refuses_force_by_default(chart: Chart) -> None:
    env = chart.render().env()
    assert env["AGENTIHOOKS_SWARM_READER_PASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": SECRET, "key": "password"}
    }
    assert env["AGENTIHOOKS_SWARM_ALLOW_FORCE_FORGET"]["value"] == "false"
    denied = env["AGENTIHOOKS_SWARM_WORKER_DENIED_SECRETS"]["value"].split(",")
    assert SECRET in denied  # No worker may mount the reader's password.
    allowed = chart.render({"records": {"allowForceForget": True}}).env()
    assert allowed["AGENTIHOOKS_SWARM_ALLOW_FORCE_FORGET"]["value"] == "true"


def test_a_supplied_reader_secret_is_mounted_and_the_controller_makes_no_user(chart: Chart) -> None:
    rendered = chart.render({"records": {"redisSecret": "my-reader"}})
    assert rendered.find("Secret", SECRET) is None
    assert "AGENTIHOOKS_SWARM_READER_PASSWORD" not in rendered.env()
    env = env_of(reader_pod(rendered))
    assert env["AGENTIHOOKS_SWARM_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "my-reader"


def test_external_redis_gives_the_reader_the_address_but_never_the_url_secret(chart: Chart) -> None:
    external: dict[str, Any] = {
        "mode": "external",
        "external": {
            "urlSecret": {"name": "redis-conn", "key": "url"},
            "tls": {"caSecret": {"name": "redis-ca", "key": "ca.pem"}},
        },
    }
    without = chart.render({"redis": external})
    assert without.find("StatefulSet", f"{RELEASE}-records") is None
    assert "AGENTIHOOKS_SWARM_READER_PASSWORD" not in without.env()
    rendered = chart.render({"redis": external, "records": {"redisUrl": "rediss://redis.example:6380/0"}})
    spec = reader_pod(rendered)
    env = env_of(spec)
    assert env["AGENTIHOOKS_SWARM_REDIS_URL"]["value"] == "rediss://redis.example:6380/0"
    assert env["AGENTIHOOKS_SWARM_REDIS_CA_FILE"]["value"].endswith("/ca.pem")
    assert env["AGENTIHOOKS_SWARM_REDIS_TLS_CHECK_HOSTNAME"]["value"] == "true"  # As the controller's.
    sentinel = {
        "mode": "external",
        "external": {
            "topology": "sentinel",
            "sentinel": {"addresses": ["s1:26379"]},
            "tls": {"enabled": True, "checkHostname": False},
        },
    }
    sentinel_env = env_of(reader_pod(chart.render({"redis": sentinel})))
    assert sentinel_env["AGENTIHOOKS_SWARM_REDIS_MODE"]["value"] == "sentinel"
    assert sentinel_env["AGENTIHOOKS_SWARM_REDIS_SENTINELS"]["value"] == "s1:26379"
    assert sentinel_env["AGENTIHOOKS_SWARM_REDIS_TLS"]["value"] == "true"
    assert sentinel_env["AGENTIHOOKS_SWARM_REDIS_TLS_CHECK_HOSTNAME"]["value"] == "false"
    assert "AGENTIHOOKS_SWARM_REDIS_URL" not in sentinel_env
    assert "redis-conn" not in str(spec)
    assert {v["name"] for v in spec["volumes"]} == {"tmp", "redis-ca"}


def test_records_disabled_renders_no_reader(chart: Chart) -> None:
    rendered = chart.render({"records": {"enabled": False}})
    assert not [o for o in rendered.objects if "records" in o["metadata"]["name"]]
    assert rendered.env()["AGENTIHOOKS_SWARM_ALLOW_FORCE_FORGET"]["value"] == "false"


def test_notes_show_the_reader_first(chart: Chart) -> None:
    notes = chart.notes()
    reader = f"kubectl exec -n {NAMESPACE} {POD} -- python -m agentihooks_swarm records VIEW SLUG EXECUTION"
    controller = f"kubectl exec -n {NAMESPACE} deployment/{RELEASE}-controller -c controller -- python -c"
    assert reader in notes and controller in notes
    assert notes.index(reader) < notes.index(controller)
    assert f"{RELEASE}-records-reader" in notes
    assert POD not in chart.notes({"records": {"enabled": False}})
