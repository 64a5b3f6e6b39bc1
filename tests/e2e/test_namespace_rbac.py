"""The operator serving a list of namespaces on the chart's RBAC for that list, and nothing more.

The chart is rendered with ``watch.namespaces`` (``helm template``, the cluster's helm) and its
RBAC applied as rendered: a Role and RoleBinding in each team's namespace, the leader's Role in the
release namespace, and the ClusterRole that holds only kopf's CRDs and namespaces. The operator
runs as the chart's ServiceAccount (``run -n A -n B``): it launches a worker in each listed
namespace and captures its refusal, leaves a third namespace's Swarm and Execution alone, and
never meets a 403 (every list and watch it makes is of one namespace).
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels
from tests.support import builders, namespaces, pods, watching
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory
from tests.support.planting import PLANTED

CHART_DIR: Final = Path(__file__).resolve().parents[2] / "charts" / "agentihooks-swarm"
RELEASE: Final = "rel"
CONTROLLER: Final = f"{RELEASE}-controller"
EXECUTION: Final = "refused"


def render_rbac(
    helm: Path, *, release_namespace: str, served: list[str], workdir: Path
) -> list[dict[str, Any]]:
    """The chart's RBAC and controller ServiceAccount for ``watch.namespaces=served``, as rendered."""
    values = workdir / "values.yaml"
    values.write_text(yaml.safe_dump({"watch": {"namespaces": served}}))
    shown = [f"--show-only=templates/{name}.yaml" for name in ("rbac", "serviceaccount")]
    done = subprocess.run(
        [
            str(helm),
            "template",
            RELEASE,
            str(CHART_DIR),
            f"--namespace={release_namespace}",
            f"--values={values}",
            *shown,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return [o for o in yaml.safe_load_all(done.stdout) if o]


async def apply(api: client.ApiClient, objects: list[dict[str, Any]]) -> None:
    """Create each rendered object as the admin (a fresh cluster has none of them)."""
    rbac, core = client.RbacAuthorizationV1Api(api), client.CoreV1Api(api)
    for rendered in objects:
        body: Any = rendered  # The client takes the plain object as its model.
        kind, namespace = body["kind"], body["metadata"].get("namespace")
        if kind == "ServiceAccount":
            await core.create_namespaced_service_account(namespace, body)
        elif kind == "Role":
            await rbac.create_namespaced_role(namespace, body)
        elif kind == "RoleBinding":
            await rbac.create_namespaced_role_binding(namespace, body)
        elif kind == "ClusterRole":
            await rbac.create_cluster_role(body)
        else:
            assert kind == "ClusterRoleBinding", kind
            await rbac.create_cluster_role_binding(body)


@pytest.fixture
def teams(control_plane: ControlPlane) -> Iterator[list[str]]:
    """Two teams' namespaces the operator serves, and a third it does not."""
    with namespaces.made(control_plane, "team-a", "team-b", "team-c") as made:
        yield made


@pytest.fixture
def cluster_wide(control_plane: ControlPlane, namespace: str) -> Iterator[str]:
    """The chart's ClusterRole name for the release in ``namespace``; it and its binding are
    deleted after the test (namespaced objects go with their namespaces)."""
    name = f"{RELEASE}-{namespace}-controller"
    yield name
    for kind in ("clusterroles", "clusterrolebindings"):
        control_plane.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/{kind}/{name}")


async def launch_refused_worker(
    api: client.ApiClient, cluster: ControlPlane, *, namespace: str, slug: str
) -> None:
    """A Swarm whose worker takes its grant, then fails with exit 78 and the planted log."""
    pod = labels.worker_pod_name(execution=EXECUTION, generation=1)
    await pods.plant_log(cluster=cluster, namespace=namespace, pod=pod, container="worker", content=PLANTED)
    behaviour = pods.protocol_annotations(phase="Failed", exit_code=78, reason="Error", run_for="2s")
    await watching.create(
        api, builders.swarm(name=slug, namespace=namespace, annotations=behaviour, terminal_port=7681)
    )
    await watching.create(api, builders.execution(name=EXECUTION, namespace=namespace, swarm=slug))


async def test_the_operator_serves_a_list_of_namespaces_on_the_charts_roles_alone(
    admin_api: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    teams: list[str],
    cluster_wide: str,
    operator: OperatorFactory,
    redis_url: str,
    tmp_path: Path,
) -> None:
    served, untouched = teams[:2], teams[2]
    rendered = render_rbac(
        control_plane.bin_dir / "helm", release_namespace=namespace, served=served, workdir=tmp_path
    )
    assert {(o["kind"], o["metadata"].get("namespace")) for o in rendered if o["kind"] == "Role"} == {
        ("Role", team) for team in [*served, namespace]
    }
    await apply(admin_api, rendered)
    kubeconfig = control_plane.service_account_kubeconfig(
        namespace=namespace, name=CONTROLLER, path=tmp_path / "controller.kubeconfig"
    )
    suffix = uuid.uuid4().hex[:6]
    slugs = {team: f"{team.rsplit('-', 1)[0]}-{suffix}" for team in teams}
    for team in teams:
        await launch_refused_worker(admin_api, control_plane, namespace=team, slug=slugs[team])
    process = operator(
        kubeconfig=kubeconfig,
        namespace=None,
        namespaces=served,
        env={"AGENTIHOOKS_SWARM_LEASE_NAMESPACE": namespace, "AGENTIHOOKS_SWARM_LEASE_NAME": CONTROLLER},
    )

    for team in served:

        async def done(team: str = team) -> dict[str, Any] | None:
            status = await watching.status_of(admin_api, team, EXECUTION)
            return status if status.get("phase") == "Done" else None

        status = await watching.eventually(
            done, what=f"{team}'s Execution Done", operator=process, timeout=90
        )
        assert status["outcome"] == "failed", status
        retained = await watching.stored(
            redis_url, slug=slugs[team], name="attempt-retained", execution=EXECUTION
        )
        [entry] = retained["removed"]["pods"]
        [container] = entry["startup"]["containers"]
        assert container["terminated"]["exitCode"] == 78
        assert container["log"].endswith(PLANTED.decode())
        assert not (await client.CoreV1Api(admin_api).list_namespaced_pod(team)).items

    # The third namespace was never served: its Execution has no status, its Swarm no worker.
    assert await watching.status_of(admin_api, untouched, EXECUTION) == {}
    assert not (await client.CoreV1Api(admin_api).list_namespaced_pod(untouched)).items
    assert (
        await watching.stored(redis_url, slug=slugs[untouched], name="attempt-retained", execution=EXECUTION)
        is None
    )
    assert not refusals_in(process.log())
    assert process.running


# A log line's own timestamp ends in milliseconds ("...,403]"), so a refusal is looked for in the
# message after the "[time] logger [LEVEL]" prefix, and 403 only as a number of its own.
_PREFIX: Final = re.compile(r"^\[[^\]]*\]\s+\S+\s+\[[^\]]*\]\s?")
_REFUSAL: Final = re.compile(r"\b403\b|forbidden|permissions", re.IGNORECASE)


def refusals_in(log: str) -> list[str]:
    return [line for line in log.splitlines() if _REFUSAL.search(_PREFIX.sub("", line))]
