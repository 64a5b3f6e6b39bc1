"""The bench with owned worker Pods: scenario A's planted Pod as its launch left it, which operator
releases the evidence finalizer, the per-operator requests of a start and the reason for every
request A makes (pure; no cluster)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agentihooks_swarm.kubernetes import labels, owners
from tests.bench import against, measure, report, run
from tests.bench.run import Result
from tests.support.proxy import Call
from tests.unit.bench_results import fabricated

REVISION = against.Revision(commit="9729af1" + "0" * 33, short="9729af1", subject="Bench --against")


def test_a_planted_pod_is_owned_by_its_execution_and_failed_with_78() -> None:
    pod = run.planted_pod(namespace="ns", execution="x00001", uid="uid-1", finalizer=True)
    metadata = pod["metadata"]
    assert metadata["name"] == run.pod_name("x00001") == "swarm-worker-x00001-1"
    assert metadata["labels"] == labels.attempt(slug=run.SLUG, execution="x00001", generation=1)
    assert owners.controller_uid(pod) == "uid-1"
    assert owners.owned(pod, execution_uid="uid-1")
    assert owners.holds_evidence(pod)
    assert metadata["ownerReferences"] == [owners.execution_reference(name="x00001", uid="uid-1")]
    behaviour = metadata["annotations"]
    assert "Failed" in behaviour.values() and "78" in behaviour.values()


def test_for_an_operator_that_never_releases_the_finalizer_the_pod_has_none() -> None:
    pod = run.planted_pod(namespace="ns", execution="x00001", uid="uid-1", finalizer=False)
    assert owners.owned(pod, execution_uid="uid-1")
    assert not owners.holds_evidence(pod)
    assert "finalizers" not in pod["metadata"]


def test_the_operator_releases_the_finalizer_where_its_source_has_owners(tmp_path: Path) -> None:
    assert run.makes_owned_pods(run.REPO)  # The working tree.
    assert not run.makes_owned_pods(tmp_path)  # A revision from before ownership.
    (tmp_path / run.OWNERS_MODULE).parent.mkdir(parents=True)
    (tmp_path / run.OWNERS_MODULE).write_text("")
    assert run.makes_owned_pods(tmp_path)


def _name(method: str, path: str, query: str = "") -> str:
    return measure.normalise(Call(method=method, path=path, query=query))


@pytest.mark.parametrize(
    ("method", "path", "query"),
    [
        ("GET", "/api", ""),
        ("GET", "/api/v1", ""),
        ("GET", "/apis", ""),
        ("GET", "/apis/swarm.agentihooks.io/v1alpha1", ""),
        ("GET", "/api/v1/namespaces", ""),
        ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", ""),
        ("GET", "/apis/swarm.agentihooks.io/v1alpha1/namespaces/b-1/executions", "limit=100"),
        ("GET", "/apis/swarm.agentihooks.io/v1alpha1/namespaces/b-1/swarms", ""),
        ("GET", "/api/v1/namespaces/b-1/pods", "labelSelector=swarm.agentihooks.io/execution-id"),
        ("GET", "/api/v1/namespaces/b-1/pods", "watch=true&labelSelector=swarm.agentihooks.io/execution-id"),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/b-1/leases/agentihooks-swarm", ""),
    ],
)
def test_a_start_lists_and_discovers_once_per_operator(method: str, path: str, query: str) -> None:
    assert measure.operator_wide(_name(method, path, query))


@pytest.mark.parametrize(
    ("method", "path", "query"),
    [
        ("GET", "/api/v1/namespaces/b-1/pods/swarm-worker-x00001-1", ""),
        ("GET", "/api/v1/namespaces/b-1/pods/swarm-worker-x00001-1/log", "limitBytes=65536"),
        ("DELETE", "/api/v1/namespaces/b-1/pods/swarm-worker-x00001-1", ""),
        ("PATCH", "/api/v1/namespaces/b-1/pods/swarm-worker-x00001-1", ""),
        (
            "GET",
            "/api/v1/namespaces/b-1/pods",
            "labelSelector=swarm.agentihooks.io/execution-id=x00001,swarm.agentihooks.io/generation=1",
        ),
        ("GET", "/apis/swarm.agentihooks.io/v1alpha1/namespaces/b-1/executions/x00001", ""),
        ("POST", "/api/v1/namespaces/b-1/pods", ""),
    ],
)
def test_each_pods_requests_stay_per_pod(method: str, path: str, query: str) -> None:
    assert not measure.operator_wide(_name(method, path, query))


def test_an_attempts_pin_and_the_worker_pods_list_are_told_apart() -> None:
    pods = "/api/v1/namespaces/b-1/pods"
    assert _name("GET", pods, "labelSelector=a=b,c=d").endswith("?labelSelector={attempt}")
    assert _name("GET", pods, "labelSelector=a&limit=100").endswith("?labelSelector={key}")


#: Every per-Pod request of an A run with owned Pods (N = 50, capture and baseline), start-up included.
A_REQUESTS = [
    "DELETE /api/v1/namespaces/{ns}/pods/{pod}",
    "GET /api/v1/namespaces/{ns}/pods/{pod}",
    "GET /api/v1/namespaces/{ns}/pods/{pod}/log",
    "GET /api/v1/namespaces/{ns}/pods?labelSelector={attempt}",
    "GET /api/v1/namespaces/{ns}/secrets/{name}",
    "GET /api/v1/namespaces/{ns}/services?labelSelector={attempt}",
    "GET /apis/swarm.agentihooks.io/v1alpha1/namespaces/{ns}/executions/{execution}",
    "GET /apis/swarm.agentihooks.io/v1alpha1/namespaces/{ns}/swarms/{swarm}",
    "PATCH /api/v1/namespaces/{ns}/pods/{pod}",
    "PATCH /apis/swarm.agentihooks.io/v1alpha1/namespaces/{ns}/executions/{execution}",
    "PATCH /apis/swarm.agentihooks.io/v1alpha1/namespaces/{ns}/executions/{execution}/status",
    "PATCH /apis/swarm.agentihooks.io/v1alpha1/namespaces/{ns}/swarms/{swarm}/status",
    "POST /api/v1/namespaces/{ns}/events",
    "POST /api/v1/namespaces/{ns}/pods",
    "POST /api/v1/namespaces/{ns}/secrets",
]


@pytest.mark.parametrize("call", A_REQUESTS)
def test_every_request_of_a_run_is_explained(call: str) -> None:
    assert report.why("A", call) != "**not explained**"


def test_the_release_of_the_evidence_finalizer_is_explained_in_both_scenarios() -> None:
    call = "PATCH /api/v1/namespaces/{ns}/pods/{pod}"
    assert "evidence finalizer" in report.why("A", call)
    assert "evidence finalizer" in report.why("B", call)


def _result(*, revision: str = "", scenario: run.Scenario = "A", finalizer: bool | None = True) -> Result:
    return fabricated(
        scenario=scenario,
        mode="capture",
        n=10,
        wall_seconds=1.0,
        latency_record=[0.5] * 10,
        latency_gone=[0.5] * 10,
        settle_seconds=4.0,
        revision=revision,
        planted_finalizer=finalizer,
    )


def test_the_against_section_says_which_side_was_planted_with_the_finalizer() -> None:
    tree = _result()
    rev = replace(_result(finalizer=False), revision="9729af1")
    text = "\n".join(against.section(results=[tree, rev], revision=REVISION))
    assert "evidence finalizer on the working tree side only" in text
    assert "the REV operator deletes a Pod but never releases" in text


def test_the_against_section_says_nothing_of_it_when_both_sides_were_planted_alike() -> None:
    tree, rev = _result(), _result(revision="9729af1")
    b_tree, b_rev = _result(scenario="B", finalizer=None), _result(scenario="B", finalizer=None, revision="x")
    for results in ([tree, rev], [b_tree, b_rev]):
        assert "evidence finalizer" not in "\n".join(against.section(results=results, revision=REVISION))


def test_results_saved_before_the_field_load_without_it() -> None:
    saved = {k: v for k, v in vars(_result()).items() if k != "planted_finalizer"}
    assert Result(**saved).planted_finalizer is None
