"""What a Swarm may put in its workers (lifecycle/worker_policy.py): every rule, allowed and not."""

from __future__ import annotations

from typing import Any

import pytest

from agentihooks_swarm import resources, settings
from agentihooks_swarm.lifecycle import status, worker_policy
from agentihooks_swarm.lifecycle.worker_policy import WorkerPolicy

#: The chart's defaults: its worker ServiceAccount and its Redis Secret.
CHART = WorkerPolicy(service_account="rel-worker", denied_secrets=("rel-redis",))


def worker(**fields: Any) -> resources.WorkerTemplate:
    return resources.WorkerTemplate.model_validate({"image": "busybox", **fields})


def secret_env(name: str) -> dict[str, Any]:
    return {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": name, "key": "token"}}}


def messages(template: resources.WorkerTemplate, policy: WorkerPolicy = CHART) -> list[str]:
    return [str(v) for v in worker_policy.check(template, policy=policy)]


def test_the_safe_defaults_are_the_settings_defaults() -> None:
    policy = WorkerPolicy.from_settings(settings.Settings())
    assert policy == WorkerPolicy()
    assert policy.service_account is None and policy.allowed_service_accounts == ()
    assert policy.secret_prefixes == ("swarm-worker-",)
    assert (policy.secrets, policy.denied_secrets, policy.metadata_prefixes) == ((), (), ())


def test_settings_lists_are_comma_separated() -> None:
    policy = WorkerPolicy.from_settings(
        settings.Settings.from_env(
            {
                "AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNT": "rel-worker",
                "AGENTIHOOKS_SWARM_WORKER_SERVICE_ACCOUNTS": " builder, rel-worker ,,",
                "AGENTIHOOKS_SWARM_WORKER_SECRET_PREFIXES": "team-a-,team-b-",
                "AGENTIHOOKS_SWARM_WORKER_SECRETS": "registry-token",
                "AGENTIHOOKS_SWARM_WORKER_DENIED_SECRETS": "rel-redis",
                "AGENTIHOOKS_SWARM_WORKER_METADATA_PREFIXES": "example.com/",
            }
        )
    )
    assert policy.allowed_service_accounts == ("rel-worker", "builder")
    assert policy.secret_prefixes == ("team-a-", "team-b-")
    assert (policy.secrets, policy.denied_secrets) == (("registry-token",), ("rel-redis",))
    assert policy.metadata_prefixes == ("example.com/",)


def test_a_plain_template_is_allowed_and_runs_as_the_worker_service_account() -> None:
    template = worker(env=[{"name": "A", "value": "1"}], labels={"team": "a"}, annotations={"note": "x"})
    assert worker_policy.check(template, policy=CHART) == ()
    assert worker_policy.check(template, policy=WorkerPolicy()) == ()
    swarm = resources.SwarmSpec(worker=template)
    assert worker_policy.launchable(swarm, policy=CHART).worker.service_account_name == "rel-worker"
    # Without a worker ServiceAccount in the policy the Pod names none (the namespace's default).
    assert worker_policy.launchable(swarm, policy=WorkerPolicy()) is swarm


# --- ServiceAccounts ---------------------------------------------------------------------------------


def test_service_account_the_workers_own_is_allowed() -> None:
    template = worker(serviceAccountName="rel-worker")
    assert messages(template) == []
    launched = worker_policy.launchable(resources.SwarmSpec(worker=template), policy=CHART)
    assert launched.worker.service_account_name == "rel-worker"


def test_service_account_another_is_not_and_the_message_names_it() -> None:
    assert messages(worker(serviceAccountName="default")) == [
        'spec.worker.serviceAccountName: "default" is not allowed (allowed: rel-worker)'
    ]
    assert messages(worker(serviceAccountName="default"), WorkerPolicy()) == [
        'spec.worker.serviceAccountName: "default" is not allowed (allowed: none, leave it unset)'
    ]


def test_service_account_a_listed_one_or_any_with_a_star() -> None:
    listed = CHART.model_copy(update={"service_accounts": ("builder",)})
    assert messages(worker(serviceAccountName="builder"), listed) == []
    assert messages(worker(serviceAccountName="other"), listed) == [
        'spec.worker.serviceAccountName: "other" is not allowed (allowed: rel-worker, builder)'
    ]
    assert (
        messages(worker(serviceAccountName="other"), CHART.model_copy(update={"service_accounts": ("*",)}))
        == []
    )


# --- Secrets and ConfigMaps -------------------------------------------------------------------------

NEVER = "never swarm-worker-redis-*, sh.helm.release.v1.*, rel-redis"


@pytest.mark.parametrize("name", ["swarm-worker-db", "swarm-worker-"])
def test_secret_under_the_prefix_is_allowed(name: str) -> None:
    assert messages(worker(env=[secret_env(name)])) == []


@pytest.mark.parametrize(
    "name",
    [
        "db-password",
        "rel-redis",  # the Redis Secret the controller reads (denied by the chart)
        "sh.helm.release.v1.rel.v1",  # Helm's release record
        "swarm-worker-redis-other",  # another swarm's worker credential, though under the prefix
        "swarm-worker-redis-",
    ],
)
def test_secret_outside_the_prefix_or_never_allowed_is_not(name: str) -> None:
    template = worker(env=[{"name": "A", "value": "1"}, secret_env(name)])
    assert messages(template) == [
        f'spec.worker.env[1].valueFrom.secretKeyRef.name: "{name}" is not allowed '
        f"(allowed: names starting with swarm-worker-; {NEVER})"
    ]


def test_secret_listed_by_name_or_star_but_never_the_denied_ones() -> None:
    policy = CHART.model_copy(update={"secrets": ("registry-token", "rel-redis")})
    assert messages(worker(env=[secret_env("registry-token")]), policy) == []
    assert messages(worker(env=[secret_env("rel-redis")]), policy) == [
        'spec.worker.env[0].valueFrom.secretKeyRef.name: "rel-redis" is not allowed (allowed: names '
        f"starting with swarm-worker- or the names registry-token, rel-redis; {NEVER})"
    ]
    anything = WorkerPolicy(secret_prefixes=(), secrets=("*",), denied_secrets=("rel-redis",))
    assert messages(worker(env=[secret_env("db-password")]), anything) == []
    assert len(messages(worker(env=[secret_env("sh.helm.release.v1.x.v2")]), anything)) == 1
    assert len(messages(worker(env=[secret_env("rel-redis")]), anything)) == 1


def test_secret_with_no_prefix_nor_name_allows_none() -> None:
    none = WorkerPolicy(secret_prefixes=())
    assert messages(worker(env=[secret_env("swarm-worker-db")]), none) == [
        'spec.worker.env[0].valueFrom.secretKeyRef.name: "swarm-worker-db" is not allowed '
        "(allowed: none; never swarm-worker-redis-*, sh.helm.release.v1.*)"
    ]


def test_config_maps_but_the_grants_are_allowed() -> None:
    def config_map(name: str) -> dict[str, Any]:
        return {"name": "C", "valueFrom": {"configMapKeyRef": {"name": name, "key": "k"}}}

    assert messages(worker(env=[config_map("settings")])) == []
    assert messages(worker(env=[config_map("swarm-grant-other-1")])) == [
        'spec.worker.env[0].valueFrom.configMapKeyRef.name: "swarm-grant-other-1" is not allowed '
        "(allowed: any ConfigMap but the operator's grants, swarm-grant-*)"
    ]


def test_other_env_sources_are_allowed() -> None:
    template = worker(
        env=[
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        ]
    )
    assert messages(template) == []


# --- the Pod's securityContext ----------------------------------------------------------------------

RESTRICTED_ALLOWED: list[dict[str, Any]] = [
    {"runAsNonRoot": True},
    {"runAsUser": 1000, "runAsGroup": 0, "fsGroup": 2000, "supplementalGroups": [3000]},
    {"fsGroupChangePolicy": "OnRootMismatch", "supplementalGroupsPolicy": "Merge"},
    {"seccompProfile": {"type": "RuntimeDefault"}},
    {"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/worker.json"}},
    {"appArmorProfile": {"type": "RuntimeDefault"}},
    {"appArmorProfile": {"type": "Localhost", "localhostProfile": "worker"}},
    {"seLinuxOptions": {"type": "container_t", "level": "s0:c123,c456"}},
    {"seLinuxOptions": {"user": "", "role": ""}},
    {"seLinuxChangePolicy": "MountOption"},
    {"sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]},
    {"windowsOptions": {"hostProcess": False, "runAsUserName": "worker"}},
]


@pytest.mark.parametrize("context", RESTRICTED_ALLOWED, ids=lambda c: ",".join(c))
def test_security_context_restricted_allows(context: dict[str, Any]) -> None:
    assert messages(worker(securityContext=context)) == []


RESTRICTED_REFUSED: list[tuple[dict[str, Any], str]] = [
    (
        {"runAsNonRoot": False},
        "spec.worker.securityContext.runAsNonRoot: false is not allowed (allowed: true",
    ),
    (
        {"runAsUser": 0},
        "spec.worker.securityContext.runAsUser: 0 is not allowed (allowed: any user but root (0)",
    ),
    (
        {"seccompProfile": {"type": "Unconfined"}},
        'spec.worker.securityContext.seccompProfile.type: "Unconfined" is not allowed '
        "(allowed: RuntimeDefault, Localhost",
    ),
    (
        {"appArmorProfile": {"type": "Unconfined"}},
        'spec.worker.securityContext.appArmorProfile.type: "Unconfined" is not allowed',
    ),
    (
        {"seLinuxOptions": {"type": "spc_t"}},
        'spec.worker.securityContext.seLinuxOptions.type: "spc_t" is not',
    ),
    (
        {"seLinuxOptions": {"user": "system_u"}},
        'spec.worker.securityContext.seLinuxOptions.user: "system_u" is not allowed (allowed: unset',
    ),
    ({"seLinuxOptions": {"role": "sysadm_r"}}, 'spec.worker.securityContext.seLinuxOptions.role: "sysadm_r"'),
    (
        {
            "sysctls": [
                {"name": "kernel.shm_rmid_forced", "value": "1"},
                {"name": "kernel.msgmax", "value": "1"},
            ]
        },
        'spec.worker.securityContext.sysctls[1].name: "kernel.msgmax" is not allowed',
    ),
    (
        {"windowsOptions": {"hostProcess": True}},
        "spec.worker.securityContext.windowsOptions.hostProcess: true is not allowed (allowed: false",
    ),
    (
        {"privileged": True},
        'spec.worker.securityContext: key "privileged" is not allowed (allowed: appArmorProfile',
    ),
]


@pytest.mark.parametrize(
    "context,message", RESTRICTED_REFUSED, ids=lambda c: ",".join(c) if isinstance(c, dict) else ""
)
def test_security_context_restricted_refuses(context: dict[str, Any], message: str) -> None:
    [found] = messages(worker(securityContext=context))
    assert found.startswith(message), found
    assert found.endswith("; Pod Security restricted)")


def test_security_context_several_at_once_each_named() -> None:
    found = messages(
        worker(
            securityContext={"runAsUser": 0, "appArmorProfile": {"type": "Unconfined"}, "runAsNonRoot": False}
        )
    )
    assert [m.split(":", 1)[0] for m in found] == [
        "spec.worker.securityContext.runAsNonRoot",
        "spec.worker.securityContext.runAsUser",
        "spec.worker.securityContext.appArmorProfile.type",
    ]


# --- labels and annotations -------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["labels", "annotations"])
def test_keys_without_a_prefix_are_allowed_and_prefixed_ones_only_when_listed(field: str) -> None:
    assert messages(worker(**{field: {"team": "a", "app": "b"}})) == []
    refused = "sidecar.istio.io/inject"
    assert messages(worker(**{field: {refused: "true"}})) == [
        f'spec.worker.{field}: key "{refused}" is not allowed (allowed: keys without a prefix; never under '
        "swarm.agentihooks.io)"
    ]
    for key in ("app.kubernetes.io/name", "example.k8s.io/x", "vault.hashicorp.com/agent-inject"):
        assert len(messages(worker(**{field: {key: "x"}}))) == 1, key
    listed = CHART.model_copy(update={"metadata_prefixes": ("example.com/", "app.kubernetes.io/")})
    assert messages(worker(**{field: {"example.com/team": "a", "app.kubernetes.io/name": "w"}}), listed) == []
    assert messages(worker(**{field: {"evil-example.com/x": "a"}}), listed) == [
        f'spec.worker.{field}: key "evil-example.com/x" is not allowed (allowed: keys without a prefix, or '
        "under example.com/, app.kubernetes.io/; never under swarm.agentihooks.io)"
    ]


@pytest.mark.parametrize(
    "key",
    [
        "swarm.agentihooks.io/controller-owner",
        "swarm.agentihooks.io/waiting-at-deadline",
        "relaunch.swarm.agentihooks.io/swarm",
    ],
)
def test_the_operators_own_keys_are_never_allowed(key: str) -> None:
    anything = CHART.model_copy(update={"metadata_prefixes": ("*", "swarm.agentihooks.io/")})
    assert len(messages(worker(labels={key: "x"}), anything)) == 1
    assert len(messages(worker(annotations={key: "x"}), anything)) == 1
    assert messages(worker(annotations={"other.io/x": "y", "agentihooks.io/x": "y"}), anything) == []


# --- the Execution's answer -------------------------------------------------------------------------


def test_the_answer_is_invalid_names_each_violation_and_keeps_the_swarm_stamp() -> None:
    violations = worker_policy.check(
        worker(serviceAccountName="default", env=[secret_env("db")]), policy=CHART
    )
    answer = status.worker_not_allowed(
        swarm="s", violations=worker_policy.describe(violations), swarm_stamp="uid/2"
    )
    assert answer.phase == "Invalid"
    [condition] = answer.conditions
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Invalid",
        "True",
        "WorkerNotAllowed",
    )
    assert (
        'spec.worker.serviceAccountName: "default" is not allowed (allowed: rel-worker); '
        in condition["message"]
    )
    assert 'spec.worker.env[0].valueFrom.secretKeyRef.name: "db" is not allowed' in condition["message"]
    assert "No worker Pod was created" in condition["message"]
    assert answer.fields == {status.REJECTED_WITH: "uid/2"}
    # Like a refused Pod: a change of the Swarm (a new stamp) launches it again.
    assert status.stale_rejection({"phase": "Invalid", **answer.fields}, swarm_stamp="uid/3")
