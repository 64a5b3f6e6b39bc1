"""The chart's namespaces: one worker namespace (the default), a list of them (``watch.namespaces``:
a Role and RoleBinding in each, nothing cluster-wide on Pods, Secrets or the custom resources), or
every namespace (``watch.allNamespaces``: the worker rules in the ClusterRole).
tests/e2e/test_namespace_rbac.py runs the operator on the list's Roles alone."""

from __future__ import annotations

from typing import Final

import pytest

from tests.chart.conftest import NAMESPACE, RELEASE, Chart, Object, Rendered, RenderError, rules

TEAMS: Final = ["team-a", "team-b"]
LISTED: Final = {"watch": {"namespaces": TEAMS}}
CONTROLLER: Final = f"{RELEASE}-controller"
CLUSTER_ROLE: Final = f"{RELEASE}-{NAMESPACE}-controller"
#: What a worker Role grants that must never be granted cluster-wide unless every namespace is served.
NAMESPACED_KINDS: Final = {
    "pods",
    "pods/log",
    "configmaps",
    "services",
    "secrets",
    "events",
    "swarms",
    "executions",
    "swarms/status",
    "executions/status",
}


def _in(rendered: Rendered, kind: str, name: str) -> dict[str, Object]:
    """The objects of ``kind`` named ``name``, by namespace."""
    return {o["metadata"]["namespace"]: o for o in rendered.of(kind) if o["metadata"]["name"] == name}


def _worker_rules(chart: Chart) -> set[tuple[str, str, str, str]]:
    """The worker Role's rules with the defaults (tests/chart/test_chart.py says what they are)."""
    return rules(chart.render().one("Role", CONTROLLER))


def test_a_list_gets_a_role_and_binding_in_each_namespace_and_nothing_cluster_wide(chart: Chart) -> None:
    worker = _worker_rules(chart)
    rendered = chart.render(LISTED)
    roles = _in(rendered, "Role", CONTROLLER)
    bindings = _in(rendered, "RoleBinding", CONTROLLER)
    assert set(roles) == set(bindings) == set(TEAMS)
    subject = {"kind": "ServiceAccount", "name": CONTROLLER, "namespace": NAMESPACE}
    for team in TEAMS:
        assert rules(roles[team]) == worker
        assert bindings[team]["subjects"] == [subject]
        assert bindings[team]["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": CONTROLLER,
        }
    # The leader's Lease stays in the release namespace; no worker Role is left in the default one.
    assert set(_in(rendered, "Role", f"{CONTROLLER}-leader")) == {NAMESPACE}
    assert f"{NAMESPACE}-workers" not in roles
    # The ClusterRole is kopf's alone (CRDs, namespaces), as with one namespace.
    cluster = rules(rendered.one("ClusterRole", CLUSTER_ROLE))
    assert cluster == rules(chart.render().one("ClusterRole", CLUSTER_ROLE))
    assert not {rule for rule in cluster if rule[1] in NAMESPACED_KINDS}
    assert {rule[1] for rule in cluster} == {"customresourcedefinitions", "namespaces"}


def test_a_list_is_what_the_controller_serves(chart: Chart) -> None:
    rendered = chart.render(LISTED)
    args = rendered.controller()["args"]
    assert [a for a in args if a.startswith("--namespace")] == [f"--namespace={t}" for t in TEAMS]
    assert "--all-namespaces" not in args
    env = rendered.env()
    assert env["AGENTIHOOKS_SWARM_NAMESPACES"]["value"] == ",".join(TEAMS)
    assert "AGENTIHOOKS_SWARM_NAMESPACE" not in env
    assert env["AGENTIHOOKS_SWARM_LEASE_NAMESPACE"]["value"] == NAMESPACE


def test_a_list_gets_the_worker_service_account_and_the_policy_in_each_and_no_namespace_made(
    chart: Chart,
) -> None:
    rendered = chart.render(LISTED)
    accounts = _in(rendered, "ServiceAccount", f"{RELEASE}-worker")
    assert set(accounts) == set(TEAMS)
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    assert not rendered.of("Namespace")  # The teams' namespaces are the admin's to make.
    binding = rendered.one("ValidatingAdmissionPolicyBinding", f"{RELEASE}-{NAMESPACE}-workers")
    [expression] = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert expression == {"key": "kubernetes.io/metadata.name", "operator": "In", "values": TEAMS}


def test_the_notes_name_the_namespaces_served(chart: Chart) -> None:
    notes = chart.notes(LISTED)
    assert "Swarms and Executions in namespaces team-a, team-b." in notes
    assert "granted a Role in each of team-a, team-b" in notes
    assert "in namespace ns-workers" in chart.notes()


def test_all_namespaces_puts_the_worker_rules_in_the_cluster_role_alone(chart: Chart) -> None:
    worker = _worker_rules(chart)
    rendered = chart.render({"watch": {"allNamespaces": True}})
    assert not _in(rendered, "Role", CONTROLLER) and not _in(rendered, "RoleBinding", CONTROLLER)
    cluster = rules(rendered.one("ClusterRole", CLUSTER_ROLE))
    assert worker <= cluster
    assert {rule[1] for rule in cluster - worker} == {"customresourcedefinitions"}
    assert "--all-namespaces" in rendered.controller()["args"]
    assert not {"AGENTIHOOKS_SWARM_NAMESPACE", "AGENTIHOOKS_SWARM_NAMESPACES"} & set(rendered.env())


def test_one_namespace_is_as_before(chart: Chart) -> None:
    rendered = chart.render({"watch": {"namespace": "work"}})
    assert set(_in(rendered, "Role", CONTROLLER)) == {"work"}
    assert rendered.env()["AGENTIHOOKS_SWARM_NAMESPACE"]["value"] == "work"
    assert "AGENTIHOOKS_SWARM_NAMESPACES" not in rendered.env()


def test_a_list_and_all_namespaces_together_are_refused(chart: Chart) -> None:
    with pytest.raises(RenderError, match=r"watch\.namespaces and watch\.allNamespaces"):
        chart.render({"watch": {"namespaces": TEAMS, "allNamespaces": True}})


@pytest.mark.parametrize(
    "namespaces",
    [
        pytest.param(["Team-A"], id="upper-case"),
        pytest.param(["a", "a"], id="twice"),
        pytest.param("a", id="text"),
    ],
)
def test_the_schema_refuses_a_bad_list(chart: Chart, namespaces: object) -> None:
    with pytest.raises(RenderError, match="watch"):
        chart.render({"watch": {"namespaces": namespaces}})
