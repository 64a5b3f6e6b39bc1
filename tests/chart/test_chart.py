"""The chart rendered with `helm template` over several value sets, and its schema.

Each test renders the chart (release ``rel`` in namespace ``ns``) and asserts on the parsed
objects: exact key sets, so anything unexpected fails.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any, Final

import pytest
import yaml

from agentihooks_swarm import settings
from tests.chart.conftest import CHART_DIR, NAMESPACE, RELEASE, REPO_ROOT, Chart, Object, RenderError, rules

APP_VERSION: Final = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["appVersion"]

#: The Role of the worker namespace with the defaults: every API call of the operator.
WORKER_RULES: Final = {
    *{("", "pods", verb, "*") for verb in ("get", "list", "watch", "create", "delete", "patch")},
    ("", "pods/log", "get", "*"),
    ("", "configmaps", "get", "*"),
    ("", "configmaps", "create", "*"),
    *{("", "services", verb, "*") for verb in ("get", "list", "create", "delete")},
    *{("", "secrets", verb, "*") for verb in ("get", "create", "patch")},
    *{(group, "events", verb, "*") for group in ("", "events.k8s.io") for verb in ("create", "patch")},
    ("", "events", "list", "*"),
    ("", "events", "watch", "*"),
    *{
        ("swarm.agentihooks.io", plural, verb, "*")
        for plural in ("swarms", "executions")
        for verb in ("get", "list", "watch", "patch")
    },
    ("swarm.agentihooks.io", "executions", "delete", "*"),
    *{
        ("swarm.agentihooks.io", sub, verb, "*")
        for sub in ("swarms/status", "executions/status")
        for verb in ("get", "patch")
    },
}
LEADER_RULES: Final = {
    ("coordination.k8s.io", "leases", "create", "*"),
    ("coordination.k8s.io", "leases", "get", f"{RELEASE}-controller"),
    ("coordination.k8s.io", "leases", "update", f"{RELEASE}-controller"),
}
CRD_RULES: Final = {
    ("apiextensions.k8s.io", "customresourcedefinitions", v, "*") for v in ("get", "list", "watch")
}
#: The worker namespace by default: apart from the release namespace.
WORKERS: Final = f"{NAMESPACE}-workers"
NAMESPACE_RULES: Final = {("", "namespaces", "list", "*"), ("", "namespaces", "watch", "*")}

EXTERNAL: Final = {
    "redis": {
        "mode": "external",
        "external": {
            "urlSecret": {"name": "redis-conn", "key": "url"},
            "passwordSecret": {"name": "redis-auth", "key": "secret"},
            "tls": {"caSecret": {"name": "redis-ca", "key": "ca.pem"}},
        },
    }
}


def pod_spec(deployment: Object) -> Object:
    spec: Object = deployment["spec"]["template"]["spec"]
    return spec


def test_lint_passes_on_defaults_and_external_redis(chart: Chart) -> None:
    for values in ({}, EXTERNAL, {"replicas": 2, "rbac": {"podLogs": False}}):
        done = chart.lint(values)
        assert done.returncode == 0, done.stdout + done.stderr


def test_default_objects(chart: Chart) -> None:
    rendered = chart.render()
    assert rendered.names() == {
        ("ServiceAccount", "rel-controller"),
        ("Deployment", "rel-controller"),
        ("Service", "rel-metrics"),
        ("Role", "rel-controller"),
        ("RoleBinding", "rel-controller"),
        ("Role", "rel-controller-leader"),
        ("RoleBinding", "rel-controller-leader"),
        ("ClusterRole", "rel-ns-controller"),
        ("ClusterRoleBinding", "rel-ns-controller"),
        ("Secret", "rel-redis"),
        ("Service", "rel-redis"),
        ("StatefulSet", "rel-redis"),
        # The worker namespace, apart from the release namespace (tests/chart/test_workers.py).
        ("Namespace", WORKERS),
        ("ServiceAccount", "rel-worker"),
        ("ValidatingAdmissionPolicy", "rel-ns-workers"),
        ("ValidatingAdmissionPolicyBinding", "rel-ns-workers"),
        # The records reader (tests/chart/test_records.py).
        ("ServiceAccount", "rel-records"),
        ("Secret", "rel-records-redis"),
        ("StatefulSet", "rel-records"),
        ("Role", "rel-records-reader"),
        # tests/chart/test_network_policies.py.
        ("NetworkPolicy", "rel-redis"),
        ("NetworkPolicy", "rel-controller"),
        ("NetworkPolicy", "rel-workers"),
    }
    cluster_scoped = ("ClusterRole", "ClusterRoleBinding", "Namespace", "ValidatingAdmissionPolicy")
    namespaced = [o for o in rendered.objects if not o["kind"].startswith(cluster_scoped)]
    in_workers = {
        (o["kind"], o["metadata"]["name"]) for o in namespaced if o["metadata"]["namespace"] == WORKERS
    }
    assert in_workers == {
        ("Role", "rel-controller"),
        ("RoleBinding", "rel-controller"),
        ("ServiceAccount", "rel-worker"),
        ("NetworkPolicy", "rel-workers"),
    }
    assert {o["metadata"]["namespace"] for o in namespaced} == {NAMESPACE, WORKERS}


def test_controller_runs_namespaced_with_its_probes(chart: Chart) -> None:
    rendered = chart.render()
    deployment = rendered.one("Deployment", "rel-controller")
    assert deployment["spec"]["replicas"] == 1
    container = rendered.controller()
    assert container["image"] == f"ghcr.io/agentihooks/agentihooks-swarm:{APP_VERSION}"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert "command" not in container  # The image's entrypoint: python -m agentihooks_swarm.
    assert container["args"] == [
        "run",
        f"--namespace={WORKERS}",
        "--liveness=http://0.0.0.0:8080/healthz",
        "--log-format=full",
    ]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"health": 8080, "metrics": 9090}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert pod_spec(deployment)["serviceAccountName"] == "rel-controller"
    assert not [o for o in rendered.objects if o["apiVersion"].startswith("kopf.dev/")]


def test_controller_environment_is_the_operator_settings(chart: Chart) -> None:
    env = chart.render().env()
    assert set(env) == {
        "POD_ID",
        "AGENTIHOOKS_SWARM_REDIS_URL",
        "AGENTIHOOKS_SWARM_REDIS_PASSWORD",
        "AGENTIHOOKS_SWARM_REDIS_TIMEOUT_SECONDS",
        "AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS",
        "AGENTIHOOKS_SWARM_REDIS_MIN_REPLICAS_TIMEOUT_SECONDS",
        "AGENTIHOOKS_SWARM_RETENTION_SECONDS",
        "AGENTIHOOKS_SWARM_RETENTION_SWEEP_INTERVAL_SECONDS",
        "AGENTIHOOKS_SWARM_SWARM_QUOTA_BYTES",
        "AGENTIHOOKS_SWARM_KEY_PREFIX",
        "AGENTIHOOKS_SWARM_WORKER_CREDENTIALS_INTERVAL_SECONDS",
        "AGENTIHOOKS_SWARM_WORKER_CREDENTIALS_ROTATION_SECONDS",
        "AGENTIHOOKS_SWARM_NAMESPACE",
        "AGENTIHOOKS_SWARM_API_TIMEOUT_SECONDS",
        "AGENTIHOOKS_SWARM_METRICS_PORT",
        "AGENTIHOOKS_SWARM_ARCHIVE_DEADLINE_SECONDS",
        "AGENTIHOOKS_SWARM_STARTUP_DEADLINE_SECONDS",
        "AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS",
        "AGENTIHOOKS_SWARM_TTL_SECONDS_AFTER_FINISHED",
        "AGENTIHOOKS_SWARM_LEASE_NAMESPACE",
        "AGENTIHOOKS_SWARM_LEASE_NAME",
        "AGENTIHOOKS_SWARM_LEASE_DURATION_SECONDS",
        "AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNT",
        "AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNTS",
        "AGENTIHOOKS_SWARM_WORKER_SECRET_PREFIXES",
        "AGENTIHOOKS_SWARM_WORKER_SECRETS",
        "AGENTIHOOKS_SWARM_WORKER_DENIED_SECRETS",
        "AGENTIHOOKS_SWARM_WORKER_METADATA_PREFIXES",
        "AGENTIHOOKS_SWARM_READER_PASSWORD",
        "AGENTIHOOKS_SWARM_ALLOW_FORCE_FORGET",
        "AGENTIHOOKS_SWARM_STORE_REDACTED",
    }
    fields = {settings.PREFIX + name.upper() for name in settings.Settings.model_fields}
    assert {name for name in env if name.startswith(settings.PREFIX)} <= fields
    assert env["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["AGENTIHOOKS_SWARM_REDIS_URL"]["value"] == "redis://rel-redis.ns.svc:6379/0"
    assert env["AGENTIHOOKS_SWARM_REDIS_PASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "rel-redis", "key": "password"}
    }
    plain = {name: e["value"] for name, e in env.items() if "value" in e}
    # The operator's own parser accepts what the chart sets.
    parsed = settings.Settings.from_env({**plain, "AGENTIHOOKS_SWARM_REDIS_PASSWORD": "x"})
    assert parsed.namespace == WORKERS
    assert parsed.lease_namespace == NAMESPACE
    assert parsed.ttl_seconds_after_finished == 86400  # One day, like the chart says.
    assert parsed.lease_name == "rel-controller"
    assert parsed.metrics_port == 9090
    assert parsed.key_prefix == "agentihooks-swarm"
    assert parsed.startup_deadline_seconds == 600
    assert (parsed.redis_mode, parsed.redis_min_replicas, parsed.retention_seconds) == ("standalone", 0, 0)
    assert parsed.worker_credentials_interval_seconds == 300
    assert parsed.worker_credentials_rotation_seconds == 86400


def test_workers_reach_redis_at_the_address_the_values_give(chart: Chart) -> None:
    workers = {"url": "rediss://edge.example:6380/0", "rotationSeconds": 0}
    env = chart.render({"redis": {"workers": workers}}).env()
    assert env["AGENTIHOOKS_SWARM_WORKER_REDIS_URL"]["value"] == "rediss://edge.example:6380/0"
    plain = {name: e["value"] for name, e in env.items() if "value" in e}
    parsed = settings.Settings.from_env({**plain, "AGENTIHOOKS_SWARM_REDIS_PASSWORD": "x"})
    assert parsed.worker_redis_url == "rediss://edge.example:6380/0"
    assert parsed.worker_credentials_rotation_seconds == 0


def test_ttl_null_keeps_done_executions(chart: Chart) -> None:
    env = chart.render({"operator": {"ttlSecondsAfterFinished": None}}).env()
    assert "AGENTIHOOKS_SWARM_TTL_SECONDS_AFTER_FINISHED" not in env
    env = chart.render({"operator": {"ttlSecondsAfterFinished": 0}}).env()
    assert env["AGENTIHOOKS_SWARM_TTL_SECONDS_AFTER_FINISHED"]["value"] == "0"


def _keys(tree: Any, prefix: str = "") -> set[str]:
    if not isinstance(tree, dict):
        return set()
    found = set()
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        found |= {path.lower()} | _keys(value, path)
    return found


def _schema_keys(schema: Any, prefix: str = "") -> set[str]:
    found = set()
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{key}" if prefix else str(key)
        found |= {path.lower()} | _schema_keys(sub, path)
    return found


def test_log_limits_and_log_reads_have_no_setting(chart: Chart) -> None:
    values = _keys(yaml.safe_load((CHART_DIR / "values.yaml").read_text()))
    schema = _schema_keys(json.loads((CHART_DIR / "values.schema.json").read_text()))
    assert schema - {"global"} <= values  # The schema knows no setting that values.yaml lacks.
    for word in ("logreads", "tail", "limitbytes", "loglimit", "logbytes"):
        assert not any(word in path.replace("_", "").replace("-", "") for path in values | schema), word
    env = " ".join(chart.render().env())
    assert "LOG" not in env and "TAIL" not in env


@pytest.mark.parametrize("component", ["controller", "redis"])
def test_pods_meet_pod_security_restricted(chart: Chart, component: str) -> None:
    kind = "StatefulSet" if component == "redis" else "Deployment"
    spec = pod_spec(chart.render().one(kind, f"{RELEASE}-{component}"))
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True
    assert pod["runAsUser"] != 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec)
    for volume in spec.get("volumes", []):
        assert set(volume) - {"name"} <= {"emptyDir", "secret", "configMap", "projected"}, volume
    for container in spec["containers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["runAsNonRoot"] is True
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert sc.get("privileged") is not True
        assert set(container["resources"]) == {"requests", "limits"}
        assert {"cpu", "memory"} <= set(container["resources"]["limits"])
    if component == "controller":
        (mount,) = spec["containers"][0]["volumeMounts"]
        assert mount == {"name": "tmp", "mountPath": "/tmp"}
        assert spec["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]


def _redis_args(statefulset: Object) -> dict[str, str]:
    """The options after the config file that holds the password (test_redis_secret.py)."""
    config, *args = pod_spec(statefulset)["containers"][0]["args"]
    assert config == "/config/auth.conf"
    return dict(zip(args[::2], args[1::2], strict=True))


def test_bundled_redis(chart: Chart) -> None:
    rendered = chart.render()
    statefulset = rendered.one("StatefulSet", "rel-redis")
    redis = pod_spec(statefulset)
    (container,) = redis["containers"]
    assert container["image"] == "redis:7-alpine"
    assert container["command"] == ["redis-server"]
    assert _redis_args(statefulset) == {
        "--dir": "/data",
        "--appendonly": "yes",
        "--appendfsync": "always",
        "--save": "",
        "--maxmemory-policy": "noeviction",
        "--maxmemory": "200mb",
    }
    assert container["volumeMounts"] == [
        {"name": "data", "mountPath": "/data"},
        {"name": "config", "mountPath": "/config", "readOnly": True},
    ]
    # The data volume is the claim below, not an emptyDir.
    assert [v["name"] for v in redis["volumes"]] == ["config"]
    assert statefulset["spec"]["replicas"] == 1
    assert statefulset["spec"]["serviceName"] == "rel-redis"
    assert statefulset["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    assert redis["automountServiceAccountToken"] is False
    assert set(rendered.one("Secret", "rel-redis")["data"]) == {"password"}
    service = rendered.one("Service", "rel-redis")
    assert service["spec"]["ports"] == [
        {"name": "redis", "port": 6379, "targetPort": "redis", "protocol": "TCP"}
    ]


@pytest.mark.parametrize(("storage_class", "expected"), [("fast-ssd", "fast-ssd"), ("-", "")])
def test_bundled_redis_claim_size_and_storage_class(chart: Chart, storage_class: str, expected: str) -> None:
    persistence = {"size": "20Gi", "storageClass": storage_class}
    bundled = {"persistence": persistence, "appendFsync": "everysec", "maxmemory": ""}
    statefulset = chart.render({"redis": {"bundled": bundled}}).one("StatefulSet", "rel-redis")
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == expected
    assert claim["spec"]["resources"] == {"requests": {"storage": "20Gi"}}
    args = _redis_args(statefulset)
    assert (args["--appendfsync"], args["--maxmemory-policy"], "--maxmemory" in args) == (
        "everysec",
        "noeviction",
        False,
    )


def test_bundled_redis_without_persistence_uses_an_empty_dir(chart: Chart) -> None:
    values = {"redis": {"bundled": {"persistence": {"enabled": False}}}}
    statefulset = chart.render(values).one("StatefulSet", "rel-redis")
    assert "volumeClaimTemplates" not in statefulset["spec"]
    assert "persistentVolumeClaimRetentionPolicy" not in statefulset["spec"]
    volumes = pod_spec(statefulset)["volumes"]
    assert {"name": "data", "emptyDir": {}} in volumes and len(volumes) == 2  # And the config.
    assert "loses every record when its Pod is rescheduled" in chart.notes(values)


def test_external_sentinel_sets_the_sentinel_mode(chart: Chart) -> None:
    external = {
        "topology": "sentinel",
        "sentinel": {
            "addresses": ["sentinel-0.redis:26379", "sentinel-1.redis:26379"],
            "masterName": "evidence",
            "passwordSecret": {"name": "sentinel-auth", "key": "pw"},
        },
        "passwordSecret": {"name": "redis-auth", "key": "pw"},
    }
    values = {"redis": {"mode": "external", "minReplicas": 1, "external": external}}
    rendered = chart.render(values)
    env = rendered.env()
    assert "AGENTIHOOKS_SWARM_REDIS_URL" not in env
    plain = {name: e["value"] for name, e in env.items() if "value" in e}
    assert env["AGENTIHOOKS_SWARM_REDIS_SENTINEL_PASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "sentinel-auth", "key": "pw"}
    }
    parsed = settings.Settings.from_env(plain)
    assert parsed.redis_mode == "sentinel"
    assert parsed.sentinel_addresses == [("sentinel-0.redis", 26379), ("sentinel-1.redis", 26379)]
    assert (parsed.redis_sentinel_master, parsed.redis_min_replicas) == ("evidence", 1)
    assert rendered.find("StatefulSet", "rel-redis") is None
    assert "External Redis, sentinel (primary evidence)." in chart.notes(values)


def test_external_cluster_sets_the_cluster_mode_and_warns_without_min_replicas(chart: Chart) -> None:
    values = {
        "redis": {"mode": "external", "external": {"topology": "cluster", "url": "redis://node-0:6379/0"}}
    }
    env = chart.render(values).env()
    assert (env["AGENTIHOOKS_SWARM_REDIS_MODE"]["value"], env["AGENTIHOOKS_SWARM_REDIS_URL"]["value"]) == (
        "cluster",
        "redis://node-0:6379/0",
    )
    assert "redis.minReplicas is 0 with a cluster Redis" in chart.notes(values)


def test_notes_explain_the_upgrade_from_the_redis_deployment(chart: Chart) -> None:
    install = chart.notes()
    assert "keeps its data on the PersistentVolumeClaim\ndata-rel-redis-0" in install
    assert "Upgrading from a chart version" not in install
    upgrade = chart.notes(is_upgrade=True)
    for step in (
        "kubectl -n ns annotate deployment/rel-redis helm.sh/resource-policy=keep",
        '--no-auth-warning REPLICAOF "$1" 6379\' - "$OLD"',
        "--no-auth-warning REPLICAOF NO ONE'",
        "kubectl -n ns delete deployment/rel-redis",
    ):
        assert step in upgrade, step


def test_default_rbac_is_exactly_what_the_operator_uses(chart: Chart) -> None:
    rendered = chart.render()
    assert rules(rendered.one("Role", "rel-controller")) == WORKER_RULES
    assert rules(rendered.one("Role", "rel-controller-leader")) == LEADER_RULES
    assert rules(rendered.one("ClusterRole", "rel-ns-controller")) == CRD_RULES | NAMESPACE_RULES
    subject = {"kind": "ServiceAccount", "name": "rel-controller", "namespace": NAMESPACE}
    for kind, name, role in (
        ("RoleBinding", "rel-controller", "Role"),
        ("RoleBinding", "rel-controller-leader", "Role"),
        ("ClusterRoleBinding", "rel-ns-controller", "ClusterRole"),
    ):
        binding = rendered.one(kind, name)
        assert binding["subjects"] == [subject]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role, "name": name}


def test_pod_logs_false_drops_only_the_pods_log_rule(chart: Chart) -> None:
    rendered = chart.render({"rbac": {"podLogs": False}})
    granted = set().union(*(rules(r) for r in (*rendered.of("Role"), *rendered.of("ClusterRole"))))
    assert not {rule for rule in granted if rule[1] == "pods/log"}
    assert rules(rendered.one("Role", "rel-controller")) == WORKER_RULES - {("", "pods/log", "get", "*")}
    assert "rbac.podLogs=false" in chart.notes({"rbac": {"podLogs": False}})


def test_external_redis_with_secrets_and_tls(chart: Chart) -> None:
    rendered = chart.render(EXTERNAL)
    assert not {name for _, name in rendered.names() if name == "rel-redis"}
    env = rendered.env()
    assert env["AGENTIHOOKS_SWARM_REDIS_URL"]["valueFrom"] == {
        "secretKeyRef": {"name": "redis-conn", "key": "url"}
    }
    assert env["AGENTIHOOKS_SWARM_REDIS_PASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "redis-auth", "key": "secret"}
    }
    ca_file = env["AGENTIHOOKS_SWARM_REDIS_CA_FILE"]["value"]
    assert ca_file == "/etc/agentihooks-swarm/redis-ca/ca.pem"
    container = rendered.controller()
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["redis-ca"] == {
        "name": "redis-ca",
        "mountPath": "/etc/agentihooks-swarm/redis-ca",
        "readOnly": True,
    }
    volumes = {v["name"]: v for v in pod_spec(rendered.one("Deployment", "rel-controller"))["volumes"]}
    assert volumes["redis-ca"]["secret"] == {
        "secretName": "redis-ca",
        "items": [{"key": "ca.pem", "path": "ca.pem"}],
    }


def test_external_redis_url_value_without_password_or_tls(chart: Chart) -> None:
    env = chart.render(
        {"redis": {"mode": "external", "external": {"url": "rediss://redis.example:6380/2"}}}
    ).env()
    assert env["AGENTIHOOKS_SWARM_REDIS_URL"] == {
        "name": "AGENTIHOOKS_SWARM_REDIS_URL",
        "value": "rediss://redis.example:6380/2",
    }
    assert "AGENTIHOOKS_SWARM_REDIS_PASSWORD" not in env
    assert "AGENTIHOOKS_SWARM_REDIS_CA_FILE" not in env


def test_external_redis_needs_a_url(chart: Chart) -> None:
    with pytest.raises(RenderError, match=r"redis.external.url or redis.external.urlSecret.name"):
        chart.render({"redis": {"mode": "external"}})


def test_two_replicas_share_one_lease_and_no_kopf_peering(chart: Chart) -> None:
    rendered = chart.render({"replicas": 2})
    assert rendered.one("Deployment", "rel-controller")["spec"]["replicas"] == 2
    assert not [a for a in rendered.controller()["args"] if a.startswith(("--peering", "--standalone"))]
    assert rules(rendered.one("Role", "rel-controller")) == WORKER_RULES
    assert rules(rendered.one("Role", "rel-controller-leader")) == LEADER_RULES


def test_the_peering_value_of_earlier_versions_is_refused_with_its_name(chart: Chart) -> None:
    with pytest.raises(RenderError, match="peering"):
        chart.render({"peering": {"enabled": True}})


def test_all_namespaces(chart: Chart) -> None:
    rendered = chart.render({"watch": {"allNamespaces": True}})
    assert rendered.controller()["args"][:3] == [
        "run",
        "--all-namespaces",
        "--liveness=http://0.0.0.0:8080/healthz",
    ]
    assert "AGENTIHOOKS_SWARM_NAMESPACE" not in rendered.env()
    assert rendered.find("Role", "rel-controller") is None
    assert rendered.find("RoleBinding", "rel-controller") is None
    assert rules(rendered.one("Role", "rel-controller-leader")) == LEADER_RULES
    assert rules(rendered.one("ClusterRole", "rel-ns-controller")) == CRD_RULES | WORKER_RULES


def test_other_worker_namespace(chart: Chart) -> None:
    rendered = chart.render({"watch": {"namespace": "workers"}})
    assert "--namespace=workers" in rendered.controller()["args"]
    assert rendered.env()["AGENTIHOOKS_SWARM_NAMESPACE"]["value"] == "workers"
    assert rendered.env()["AGENTIHOOKS_SWARM_LEASE_NAMESPACE"]["value"] == NAMESPACE
    for kind in ("Role", "RoleBinding"):
        assert rendered.one(kind, "rel-controller")["metadata"]["namespace"] == "workers"
        assert rendered.one(kind, "rel-controller-leader")["metadata"]["namespace"] == NAMESPACE
    assert rendered.one("RoleBinding", "rel-controller")["subjects"][0]["namespace"] == NAMESPACE


def test_metrics_service_and_service_monitor(chart: Chart) -> None:
    rendered = chart.render({"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}})
    service = rendered.one("Service", "rel-metrics")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod_labels = rendered.one("Deployment", "rel-controller")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    monitor = rendered.one("ServiceMonitor", "rel-metrics")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}
    ]
    assert not chart.render().of("ServiceMonitor")


def test_metrics_port_zero_turns_metrics_off(chart: Chart) -> None:
    rendered = chart.render({"metrics": {"port": 0, "serviceMonitor": {"enabled": True}}})
    assert rendered.find("Service", "rel-metrics") is None
    assert not rendered.of("ServiceMonitor")
    assert {p["name"] for p in rendered.controller()["ports"]} == {"health"}
    assert rendered.env()["AGENTIHOOKS_SWARM_METRICS_PORT"]["value"] == "0"


def test_image_values(chart: Chart) -> None:
    container = chart.render(
        {"image": {"repository": "registry.local/swarm", "tag": "dev", "pullPolicy": "Always"}}
    ).controller()
    assert container["image"] == "registry.local/swarm:dev"
    assert container["imagePullPolicy"] == "Always"


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"replicas": "two"}, "/replicas"),
        ({"replicas": -1}, "/replicas"),
        ({"redis": {"mode": "other"}}, "/redis/mode"),
        ({"rbac": {"podLogs": "yes"}}, "/rbac/podLogs"),
        ({"metrics": {"port": 70000}}, "/metrics/port"),
        ({"operator": {"apiTimeoutSeconds": "ten"}}, "/operator/apiTimeoutSeconds"),
        ({"operator": {"logReads": 5}}, "/operator"),
        ({"logReads": 5}, ""),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"watch": {"allNamespaces": "true"}}, "/watch/allNamespaces"),
        ({"redis": {"external": {"url": "http://redis:6379"}}}, "/redis/external/url"),
        ({"redis": {"external": {"topology": "replicated"}}}, "/redis/external/topology"),
        ({"redis": {"external": {"topology": "sentinel"}}}, "/redis/external"),
        (
            {"redis": {"external": {"sentinel": {"addresses": ["a,b:1"]}}}},
            "/redis/external/sentinel/addresses",
        ),
        ({"redis": {"minReplicas": -1}}, "/redis/minReplicas"),
        ({"redis": {"retention": {"seconds": -1}}}, "/redis/retention/seconds"),
        ({"redis": {"bundled": {"appendFsync": "sometimes"}}}, "/redis/bundled/appendFsync"),
        ({"redis": {"bundled": {"persistence": {"size": "lots"}}}}, "/redis/bundled/persistence/size"),
        ({"redis": {"bundled": {"maxmemoryPolicy": "allkeys-lru"}}}, "/redis/bundled"),
    ],
)
def test_schema_rejects_wrong_values(chart: Chart, values: dict[str, Any], where: str) -> None:
    with pytest.raises(RenderError) as refused:
        chart.render(values)
    assert f"at '{where}" in str(refused.value)


def test_notes_print_the_read_command(chart: Chart) -> None:
    notes = chart.notes()
    command = (
        "kubectl exec -n ns deployment/rel-controller -c controller -- python -c 'import sys; "
        "from agentihooks_swarm.store import connect; store = connect(); "
        'print(store.redis.hget(store.key(sys.argv[1], "attempt-startup-diagnostics"), sys.argv[2]))'
        "' SLUG EXECUTION"
    )
    assert command in notes
    assert '"attempt-retained"' in notes and '"cleanup-journal"' in notes


def test_crds_are_the_manifests_copies(chart: Chart) -> None:
    check = subprocess.run(
        [str(CHART_DIR / "hack" / "check-crds.sh")], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    crds = {o["metadata"]["name"]: o for o in chart.render(crds=True).of("CustomResourceDefinition")}
    assert set(crds) == {"executions.swarm.agentihooks.io", "swarms.swarm.agentihooks.io"}


def test_plain_rbac_manifests_grant_what_the_chart_grants(helm: Any, tmp_path: Any) -> None:
    plain = {
        (o["kind"], o["metadata"]["name"]): o
        for path in sorted((REPO_ROOT / "manifests" / "rbac").glob("*.yaml"))
        for o in yaml.safe_load_all(path.read_text())
        if o
    }
    assert set(plain) == {
        (kind, "agentihooks-swarm-controller")
        for kind in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
    }
    done = subprocess.run(
        [str(helm), "template", "agentihooks-swarm", str(CHART_DIR), "--namespace", "agentihooks-swarm"],
        capture_output=True,
        text=True,
        check=True,
    )
    rendered = [o for o in yaml.safe_load_all(done.stdout) if o]
    # The records reader's Role is the readers', not the controller's (tests/chart/test_records.py).
    controller = [o for o in rendered if o["metadata"]["labels"]["app.kubernetes.io/component"] != "records"]
    chart_roles = set().union(*(rules(o) for o in controller if o["kind"] == "Role"))
    chart_cluster = set().union(*(rules(o) for o in rendered if o["kind"] == "ClusterRole"))
    assert rules(plain[("Role", "agentihooks-swarm-controller")]) == chart_roles
    assert rules(plain[("ClusterRole", "agentihooks-swarm-controller")]) == chart_cluster
    # The lease name the plain Role allows is the operator's default.
    assert settings.Settings().lease_name == "agentihooks-swarm-controller"
    subject = [
        {"kind": "ServiceAccount", "name": "agentihooks-swarm-controller", "namespace": "agentihooks-swarm"}
    ]
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        assert plain[(kind, "agentihooks-swarm-controller")]["subjects"] == subject
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        assert plain[(kind, "agentihooks-swarm-controller")]["metadata"]["namespace"] == "agentihooks-swarm"


def test_records_are_kept_for_good_by_default_and_the_notes_say_what_that_costs(chart: Chart) -> None:
    rendered = chart.render()
    assert rendered.env()["AGENTIHOOKS_SWARM_RETENTION_SECONDS"]["value"] == "0"
    notes = chart.notes()
    assert "Records are kept for good" in notes and "64 KiB of log per container" in notes
    chosen = chart.notes({"redis": {"retention": {"seconds": 86400}}})
    assert "Records are removed 86400 s after" in chosen and "kept for good" not in chosen
