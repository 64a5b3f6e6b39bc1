"""The chart's worker side: the worker namespace, the worker ServiceAccount, and what a Swarm may
put in a worker (the controller's AGENTIHOOKS_SWARM_WORKER_* and the ValidatingAdmissionPolicy,
rendered from the same values; tests/integration/test_worker_admission.py runs the policy)."""

from __future__ import annotations

import json
from typing import Final

import pytest

from agentihooks_swarm import settings
from agentihooks_swarm.lifecycle import worker_policy
from tests.chart.conftest import NAMESPACE, RELEASE, Chart, Object, RenderError, rules

WORKERS: Final = f"{NAMESPACE}-workers"
POLICY: Final = f"{RELEASE}-{NAMESPACE}-workers"


def _policy(chart: Chart, values: dict[str, object] | None = None) -> worker_policy.WorkerPolicy:
    env = chart.render(values).env()
    plain = {name: e["value"] for name, e in env.items() if "value" in e}
    return worker_policy.WorkerPolicy.from_settings(settings.Settings.from_env(plain))


def _variables(policy: Object) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def test_the_worker_namespace_is_apart_and_restricted_and_kept(chart: Chart) -> None:
    rendered = chart.render()
    namespace = rendered.one("Namespace", WORKERS)
    labels = namespace["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("pod-security.kubernetes.io/")} == {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    assert namespace["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert "--namespace=ns-workers" in rendered.controller()["args"]
    # The bundled Redis and its Secret stay in the release namespace, out of the workers' reach.
    assert rendered.one("Secret", f"{RELEASE}-redis")["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize(
    "values",
    [
        {"watch": {"namespace": NAMESPACE}},
        {"watch": {"createNamespace": False}},
        {"watch": {"allNamespaces": True}},
    ],
    ids=["the release namespace", "createNamespace false", "all namespaces"],
)
def test_no_namespace_is_created_when_it_is_not_the_charts_to_make(
    chart: Chart, values: dict[str, object]
) -> None:
    assert not chart.render(values).of("Namespace")


def test_the_worker_service_account_has_no_token_and_no_rbac(chart: Chart) -> None:
    rendered = chart.render()
    account = rendered.one("ServiceAccount", f"{RELEASE}-worker")
    assert account["metadata"]["namespace"] == WORKERS
    assert account["automountServiceAccountToken"] is False
    bound = [
        subject
        for binding in (*rendered.of("RoleBinding"), *rendered.of("ClusterRoleBinding"))
        for subject in binding["subjects"]
    ]
    assert {s["name"] for s in bound} == {f"{RELEASE}-controller"}
    env = rendered.env()
    assert env["AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNT"]["value"] == f"{RELEASE}-worker"


def test_the_worker_service_account_named_or_none(chart: Chart) -> None:
    named = chart.render({"workers": {"serviceAccount": {"create": False, "name": "team-worker"}}})
    assert named.find("ServiceAccount", "team-worker") is None
    assert named.env()["AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNT"]["value"] == "team-worker"
    none = chart.render({"workers": {"serviceAccount": {"create": False}}})
    assert none.find("ServiceAccount", f"{RELEASE}-worker") is None
    assert "AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNT" not in none.env()
    # All namespaces: the chart makes no worker ServiceAccount (it would be in one namespace only).
    every = chart.render({"watch": {"allNamespaces": True}})
    assert every.find("ServiceAccount", f"{RELEASE}-worker") is None
    assert "AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNT" not in every.env()


def test_the_controller_runs_the_safe_defaults_with_the_charts_names(chart: Chart) -> None:
    assert _policy(chart) == worker_policy.WorkerPolicy(
        service_account=f"{RELEASE}-worker", denied_secrets=(f"{RELEASE}-redis", f"{RELEASE}-records-redis")
    )


def test_external_redis_secrets_are_denied_and_the_admins_choices_pass_through(chart: Chart) -> None:
    values = {
        "redis": {
            "mode": "external",
            "external": {
                "urlSecret": {"name": "redis-conn", "key": "url"},
                "passwordSecret": {"name": "redis-auth", "key": "secret"},
            },
        },
        "workers": {
            "serviceAccounts": ["builder", f"{RELEASE}-worker"],
            "secretPrefixes": [],
            "secrets": ["registry-token"],
            "deniedSecrets": ["db-admin"],
            "metadataPrefixes": ["example.com/"],
        },
    }
    assert _policy(chart, values) == worker_policy.WorkerPolicy(
        service_account=f"{RELEASE}-worker",
        service_accounts=("builder", f"{RELEASE}-worker"),
        secret_prefixes=(),  # A lone "," in the env: "" would be the default prefix.
        secrets=("registry-token",),
        denied_secrets=("redis-conn", "redis-auth", "db-admin"),
        metadata_prefixes=("example.com/",),
    )
    variables = _variables(chart.render(values).one("ValidatingAdmissionPolicy", POLICY))
    assert json.loads(variables["serviceAccounts"]) == [f"{RELEASE}-worker", "builder"]
    assert json.loads(variables["secretPrefixes"]) == []
    assert json.loads(variables["secrets"]) == ["registry-token"]
    assert json.loads(variables["deniedSecrets"]) == ["redis-conn", "redis-auth", "db-admin"]
    assert json.loads(variables["metadataPrefixes"]) == ["example.com/"]


def test_the_policy_is_the_checks_rules(chart: Chart) -> None:
    """The lists the CEL rules hold are the check's own constants (the words are compared on the
    real API server, tests/integration/test_worker_admission.py)."""
    policy = chart.render().one("ValidatingAdmissionPolicy", POLICY)
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    [rule] = spec["matchConstraints"]["resourceRules"]
    assert rule == {
        "apiGroups": ["swarm.agentihooks.io"],
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["swarms"],
    }
    variables = _variables(policy)
    assert json.loads(variables["neverSecretPrefixes"]) == list(worker_policy.NEVER_SECRET_PREFIXES)
    assert json.loads(variables["neverConfigMapPrefixes"]) == list(worker_policy.NEVER_CONFIG_MAP_PREFIXES)
    security = variables["securityViolations"]
    for constant in (
        worker_policy.SECURITY_CONTEXT_FIELDS,
        worker_policy.PROFILE_TYPES,
        worker_policy.SELINUX_TYPES,
        worker_policy.SAFE_SYSCTLS,
    ):
        assert json.dumps(list(constant), separators=(",", ":")) in security, constant
    for field in ("labels", "annotations"):
        assert f"{worker_policy.OPERATOR_DOMAIN.replace('.', '[.]')}/" in variables[f"{field}Violations"]
    [validation] = spec["validations"]
    assert validation["expression"] == "size(variables.violations) == 0"


def test_the_binding_covers_the_worker_namespace_or_every_one(chart: Chart) -> None:
    binding = chart.render().one("ValidatingAdmissionPolicyBinding", POLICY)
    assert binding["spec"]["policyName"] == POLICY
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"] == {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [WORKERS]}
            ]
        }
    }
    every = chart.render({"watch": {"allNamespaces": True}}).one("ValidatingAdmissionPolicyBinding", POLICY)
    assert "matchResources" not in every["spec"]
    warn = chart.render({"workers": {"admissionPolicy": {"validationActions": ["Warn", "Audit"]}}})
    assert warn.one("ValidatingAdmissionPolicyBinding", POLICY)["spec"]["validationActions"] == [
        "Warn",
        "Audit",
    ]


def test_the_policy_can_be_turned_off_and_the_controller_still_checks(chart: Chart) -> None:
    rendered = chart.render({"workers": {"admissionPolicy": {"enabled": False}}})
    assert not rendered.of("ValidatingAdmissionPolicy") and not rendered.of(
        "ValidatingAdmissionPolicyBinding"
    )
    assert "AGENTIHOOKS_SWARM_WORKER_SECRET_PREFIXES" in rendered.env()


@pytest.mark.parametrize(
    "values",
    [
        {"workers": {"admissionPolicy": {"validationActions": ["Nope"]}}},
        {"workers": {"secrets": ["Not_A_Name"]}},
        {"workers": {"unknown": True}},
        {"watch": {"createNamespace": "yes"}},
    ],
)
def test_the_schema_refuses_bad_worker_values(chart: Chart, values: dict[str, object]) -> None:
    with pytest.raises(RenderError):
        chart.render(values)


def test_lint_passes_with_the_worker_values(chart: Chart) -> None:
    for values in (
        {"workers": {"admissionPolicy": {"enabled": False}}},
        {"watch": {"allNamespaces": True}},
        {"watch": {"namespace": NAMESPACE}},
    ):
        done = chart.lint(values)
        assert done.returncode == 0, done.stdout + done.stderr


def test_notes_name_the_worker_namespace_and_what_workers_may_use(chart: Chart) -> None:
    notes = chart.notes()
    assert f"Create Swarms and Executions in namespace {WORKERS}, not {NAMESPACE}" in notes
    assert f"ServiceAccount: {RELEASE}-worker (no RBAC, no token)" in notes
    assert "swarm-worker-" in notes
    assert "docs/security.md" in notes


def test_the_only_roles_are_the_controllers(chart: Chart) -> None:
    rendered = chart.render()
    assert {r["metadata"]["name"] for r in rendered.of("Role")} == {
        f"{RELEASE}-controller",
        f"{RELEASE}-controller-leader",
        f"{RELEASE}-records-reader",  # People's, to exec into the records reader (test_records.py).
    }
    assert all(rules(role) for role in rendered.of("Role"))
