"""The chart's ValidatingAdmissionPolicy (templates/worker-policy.yaml) on the real API server.

A Swarm whose worker asks for what the worker policy does not allow (a ServiceAccount, a Secret,
a pod security setting, a label) is refused at admission, and one it allows is admitted. The
policy is rendered with the cached ``helm`` from the chart's values, and the controller's own
check (lifecycle/worker_policy.py) runs on the same settings the same chart gives the controller:
for each case both must agree, and the refusal must carry the check's own words.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from agentihooks_swarm import resources, settings
from agentihooks_swarm.lifecycle import worker_policy
from tests.support import builders
from tests.support.cluster import ControlPlane

pytestmark = pytest.mark.integration

CHART: Final = Path(__file__).resolve().parents[2] / "charts" / "agentihooks-swarm"
ADMISSION: Final = "/apis/admissionregistration.k8s.io/v1"
#: The chart's release; the policy is bound to the test's namespace (watch.namespace).
RELEASE: Final = "wp"


def _render(control_plane: ControlPlane, namespace: str, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    done = subprocess.run(
        [
            str(control_plane.bin_dir / "helm"),
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            namespace,
            "--values",
            "-",
        ],
        input=yaml.safe_dump({"watch": {"namespace": namespace}, **values}),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def _controller_policy(objects: Sequence[Mapping[str, Any]]) -> worker_policy.WorkerPolicy:
    """The worker policy the chart's controller runs with: its Deployment's plain env values."""
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    return worker_policy.WorkerPolicy.from_settings(settings.Settings.from_env(env))


def _create(
    control_plane: ControlPlane, namespace: str, body: Mapping[str, Any], *, dry: bool
) -> tuple[int, str]:
    path = f"/apis/{resources.GROUP}/{resources.VERSION}/namespaces/{namespace}/swarms"
    status, data = control_plane.request("POST", path + ("?dryRun=All" if dry else ""), body)
    return status, data.decode(errors="replace")


def _swarm(namespace: str, worker: Mapping[str, Any], name: str = "s") -> dict[str, Any]:
    body = builders.swarm(name=name, namespace=namespace)
    body["spec"]["worker"].update(worker)
    return body


def _check(
    body: Mapping[str, Any], policy: worker_policy.WorkerPolicy
) -> tuple[worker_policy.Violation, ...]:
    """The controller's judgement of a Swarm's worker."""
    return worker_policy.check(resources.parse_swarm(name="s", spec=body["spec"]).worker, policy=policy)


@pytest.fixture
def admission(control_plane: ControlPlane, namespace: str, swarm_crds: list[str]) -> Iterator[Any]:
    """``admission(values)``: the chart's policy and binding for these values, applied and in force;
    returns the controller's policy for the same values. Removed after the test."""
    applied: list[str] = []

    def remove() -> None:
        for path in reversed(applied):
            control_plane.request("DELETE", path)
        applied.clear()
        _until(control_plane, namespace, refused=False)

    def apply(values: Mapping[str, Any]) -> worker_policy.WorkerPolicy:
        remove()
        objects = _render(control_plane, namespace, values)
        for kind, plural in (
            ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
            ("ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings"),
        ):
            [body] = [o for o in objects if o["kind"] == kind]
            control_plane.request_json("POST", f"{ADMISSION}/{plural}", body)
            applied.append(f"{ADMISSION}/{plural}/{body['metadata']['name']}")
        _until(control_plane, namespace, refused=True)
        return _controller_policy(objects)

    yield apply
    remove()


#: A Swarm every version of the policy refuses (unless it allows any ServiceAccount).
PROBE: Final = {"serviceAccountName": "probe-not-allowed"}


def _until(control_plane: ControlPlane, namespace: str, *, refused: bool) -> None:
    """Wait until the API server enforces the policy just applied (it compiles it, and its
    informers see the binding), or no longer enforces the one removed."""
    deadline = time.monotonic() + 30
    while (answer := _create(control_plane, namespace, _swarm(namespace, PROBE), dry=True))[0] != (
        403 if refused else 201
    ):
        assert time.monotonic() < deadline, f"the probe is still answered {answer}"
        time.sleep(0.2)


#: Worker templates the default policy refuses, each with one value not allowed.
REFUSED: Final[dict[str, dict[str, Any]]] = {
    "the namespace's default ServiceAccount": {"serviceAccountName": "default"},
    "a Secret outside the prefix": {
        "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "db-password", "key": "k"}}}]
    },
    "the release's Redis Secret": {
        "env": [
            {"name": "A", "value": "1"},
            {"name": "P", "valueFrom": {"secretKeyRef": {"name": f"{RELEASE}-redis", "key": "password"}}},
        ]
    },
    "Helm's release Secret": {
        "env": [
            {"name": "H", "valueFrom": {"secretKeyRef": {"name": "sh.helm.release.v1.wp.v1", "key": "r"}}}
        ]
    },
    "another swarm's worker credential": {
        "env": [
            {"name": "R", "valueFrom": {"secretKeyRef": {"name": "swarm-worker-redis-other", "key": "p"}}}
        ]
    },
    "another Execution's grant": {
        "env": [
            {"name": "G", "valueFrom": {"configMapKeyRef": {"name": "swarm-grant-e-1", "key": "grant.json"}}}
        ]
    },
    "runAsNonRoot false": {"securityContext": {"runAsNonRoot": False}},
    "runAsUser 0": {"securityContext": {"runAsUser": 0}},
    "seccomp Unconfined": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
    "AppArmor Unconfined": {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}},
    "an SELinux type": {"securityContext": {"seLinuxOptions": {"type": "spc_t"}}},
    "an SELinux user": {"securityContext": {"seLinuxOptions": {"user": "system_u"}}},
    "an unsafe sysctl": {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}},
    "a Windows host process": {"securityContext": {"windowsOptions": {"hostProcess": True}}},
    "an unknown securityContext field": {"securityContext": {"privileged": True}},
    "a sidecar injector's label": {"labels": {"sidecar.istio.io/inject": "true"}},
    "a kubernetes.io annotation": {
        "annotations": {"container.apparmor.security.beta.kubernetes.io/worker": "x"}
    },
    "the operator's own label": {"labels": {"swarm.agentihooks.io/controller-owner": "agentihooks-swarm-x"}},
    "several at once": {
        "serviceAccountName": "default",
        "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "db", "key": "k"}}}],
        "securityContext": {"runAsUser": 0, "appArmorProfile": {"type": "Unconfined"}},
        "annotations": {"linkerd.io/inject": "enabled"},
    },
}

#: Worker templates the default policy admits.
ADMITTED: Final[dict[str, dict[str, Any]]] = {
    "the worker ServiceAccount": {"serviceAccountName": f"{RELEASE}-worker"},
    "a Secret under the prefix": {
        "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "swarm-worker-db", "key": "k"}}}]
    },
    "other env sources": {
        "env": [
            {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}},
        ]
    },
    "what Pod Security restricted allows": {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 0,
            "fsGroup": 2000,
            "supplementalGroups": [3000],
            "seccompProfile": {"type": "Localhost", "localhostProfile": "w.json"},
            "appArmorProfile": {"type": "RuntimeDefault"},
            "seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"},
            "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}],
            "windowsOptions": {"hostProcess": False},
        }
    },
    "plain labels and annotations": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
}


def test_the_shipped_policy_refuses_what_the_controller_refuses_with_its_words(
    control_plane: ControlPlane, namespace: str, admission: Any
) -> None:
    policy = admission({})
    assert policy == worker_policy.WorkerPolicy(
        service_account=f"{RELEASE}-worker",
        # The controller's Redis password and the records reader's: a worker reads neither.
        denied_secrets=(f"{RELEASE}-redis", f"{RELEASE}-records-redis"),
    )
    for case, worker in REFUSED.items():
        body = _swarm(namespace, worker)
        violations = _check(body, policy)
        assert violations, case
        status, message = _create(control_plane, namespace, body, dry=True)
        assert status == 403, (case, status, message)
        reason = json.loads(message)["message"]
        assert "ValidatingAdmissionPolicy" in reason, (case, reason)
        assert reason.endswith(f"not allow workers: {worker_policy.describe(violations)}"), (case, reason)
    for case, worker in ADMITTED.items():
        body = _swarm(namespace, worker)
        assert _check(body, policy) == (), case
        status, message = _create(control_plane, namespace, body, dry=True)
        assert status == 201, (case, status, message)


def test_the_admins_choices_reach_both_the_policy_and_the_controller(
    control_plane: ControlPlane, namespace: str, admission: Any
) -> None:
    policy = admission(
        {
            "workers": {
                "serviceAccounts": ["builder"],
                "secretPrefixes": ["team-a-"],
                "secrets": ["registry-token", "db-admin"],
                "deniedSecrets": ["db-admin"],
                "metadataPrefixes": ["example.com/"],
            }
        }
    )
    assert policy.allowed_service_accounts == (f"{RELEASE}-worker", "builder")
    for worker, allowed in (
        ({"serviceAccountName": "builder"}, True),
        ({"serviceAccountName": "other"}, False),
        ({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "team-a-x", "key": "k"}}}]}, True),
        (
            {"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "swarm-worker-x", "key": "k"}}}]},
            False,
        ),
        (
            {"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "registry-token", "key": "k"}}}]},
            True,
        ),
        ({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "db-admin", "key": "k"}}}]}, False),
        ({"labels": {"example.com/team": "a"}}, True),
        ({"labels": {"evil-example.com/team": "a"}}, False),
    ):
        body = _swarm(namespace, worker)
        violations = _check(body, policy)
        status, message = _create(control_plane, namespace, body, dry=True)
        assert (status == 201, not violations) == (allowed, allowed), (worker, status, message)
        if violations:
            assert json.loads(message)["message"].endswith(worker_policy.describe(violations)), message


def test_a_swarm_admitted_before_the_policy_can_be_annotated_but_not_changed_unfixed(
    control_plane: ControlPlane, namespace: str, admission: Any
) -> None:
    old = _swarm(namespace, {"serviceAccountName": "default"}, name="old")
    assert _create(control_plane, namespace, old, dry=False)[0] == 201
    admission({})
    path = f"/apis/{resources.GROUP}/{resources.VERSION}/namespaces/{namespace}/swarms/old"

    def patch(body: Mapping[str, Any]) -> tuple[int, str]:
        status, data = control_plane.request("PATCH", path, body, content_type="application/merge-patch+json")
        return status, data.decode(errors="replace")

    assert patch({"metadata": {"annotations": {"swarm.agentihooks.io/reset-refusal-budget": "1"}}})[0] == 200
    status, message = patch({"spec": {"registration": {"projects": ["other"]}}})
    assert status == 403 and 'spec.worker.serviceAccountName: \\"default\\" is not allowed' in message, (
        message
    )
    assert patch({"spec": {"worker": {"serviceAccountName": None}}})[0] == 200
