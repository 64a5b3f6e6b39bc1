"""The pure parts of the workers' Redis credential: the user's rules, the Secret's content, what a
pass decides (rotation and its overlap), and what a worker reads from its files and variables."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions

from agentihooks_swarm import errors, resources, settings
from agentihooks_swarm.kubernetes import labels
from agentihooks_swarm.lifecycle import model, pod_template
from agentihooks_swarm.storage import acl
from agentihooks_swarm.swarm import worker_secret
from agentihooks_swarm.worker import credential

SWARM = worker_secret.SwarmRef(namespace="team-a", name="ci", uid="uid-1")
DAY = 86_400.0
INTERVAL = 300.0


def test_the_user_may_run_the_reports_commands_on_its_two_keys_only() -> None:
    rules = acl.rules(prefix="p", slug="ci", digests=["d1", "d2"])
    assert rules == [
        "reset",
        "on",
        "#d1",
        "#d2",
        "resetchannels",
        "-@all",
        "+eval",
        "+hget",
        "+hset",
        "+hsetnx",
        "%RW~p:{ci}:attempt-heartbeats",
        "%W~p:{ci}:attempt-outcomes",
    ]
    cluster = acl.rules(prefix="p", slug="ci", digests=["d1"], cluster=True)
    assert set(cluster) - set(rules) == {"+cluster|slots", "+cluster|shards", "+command"}
    assert (
        acl.rules(prefix="a*b?[c]", slug="ci", digests=["d"])[-1] == r"%W~a\*b\?\[c\]:{ci}:attempt-outcomes"
    )
    with pytest.raises(ValueError, match="at least one password"):
        acl.rules(prefix="p", slug="ci", digests=[])


def test_the_replicas_of_a_cluster_come_from_its_node_listing() -> None:
    listing = "\n".join(
        [
            "a1 10.0.0.1:6379@16379 myself,master - 0 0 1 connected 0-5460",
            "b2 10.0.0.2:6379@16379,node-b slave a1 0 0 1 connected",
            "c3 [::1]:6380@16380 replica a1 0 0 1 connected",
            "d4 10.0.0.4:6379@16379 slave,fail a1 0 0 1 disconnected",
            "e5 :0@0 slave,noaddr a1 0 0 1 disconnected",
            "",
        ]
    )
    assert acl.replicas(listing) == [("10.0.0.2", 6379), ("::1", 6380)]


def test_what_counts_as_redis_refusing_users() -> None:
    assert acl.refused(
        redis.exceptions.NoPermissionError("this user has no permissions to run 'acl|setuser'")
    )
    assert acl.refused(redis.exceptions.ResponseError("ERR unknown command 'ACL', with args beginning with"))
    assert not acl.refused(redis.exceptions.ResponseError("ERR Error in ACL SETUSER modifier '%X~'"))
    assert not acl.refused(redis.exceptions.ConnectionError("Connection refused"))
    assert acl.digest("x") == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"


@pytest.mark.parametrize(
    ("url", "stripped"),
    [
        ("redis://:pw@redis.ns.svc:6379/0", "redis://redis.ns.svc:6379/0"),
        (
            "rediss://user:pw@10.0.0.1:6380/2?ssl_cert_reqs=required",
            "rediss://10.0.0.1:6380/2?ssl_cert_reqs=required",
        ),
        ("redis://[::1]:6379/0?password=pw&username=u", "redis://[::1]:6379/0"),
        ("redis://host/0", "redis://host/0"),
    ],
)
def test_a_worker_never_gets_the_operators_password(url: str, stripped: str) -> None:
    assert worker_secret.without_credentials(url) == stripped


def test_where_workers_reach_redis_follows_the_operators_settings() -> None:
    assert worker_secret.address(
        settings.Settings(redis_url="redis://:pw@r:6379/0")
    ) == worker_secret.Address(url="redis://r:6379/0")
    assert worker_secret.address(
        settings.Settings(redis_url="redis://:pw@r:6379/0", worker_redis_url="redis://edge:6379/0")
    ) == worker_secret.Address(url="redis://edge:6379/0")
    cluster = settings.Settings(redis_mode="cluster", redis_url="redis://node-0:6379/0")
    assert worker_secret.address(cluster) == worker_secret.Address(
        url="redis://node-0:6379/0", mode="cluster"
    )
    sentinel = settings.Settings(
        redis_mode="sentinel", redis_sentinels="s0:26379,s1:26379", redis_sentinel_master="m"
    )
    assert worker_secret.address(sentinel) == worker_secret.Address(
        url="", mode="sentinel", sentinels="s0:26379,s1:26379", master="m"
    )


def secret(
    *,
    password: str = "p1",
    rotated_at: float | None = 1000.0,
    previous: str | None = None,
    owner: str = "uid-1",
    labelled: bool = True,
    supplied: bool = False,
) -> dict[str, Any]:
    annotations = {}
    if rotated_at is not None:
        annotations[labels.ROTATED_AT] = worker_secret.timestamp(rotated_at)
    if previous is not None:
        annotations[labels.PREVIOUS_DIGEST] = previous
    if supplied:
        annotations[labels.SUPPLIED] = "true"
    return {
        "metadata": {
            "name": SWARM.secret,
            "labels": {labels.CREDENTIAL: "ci"} if labelled else {},
            "annotations": annotations,
            "ownerReferences": [{"kind": "Swarm", "uid": owner}],
        },
        "data": {"password": base64.b64encode(password.encode()).decode()} if password else {},
    }


def plan(found: dict[str, Any], *, now: float, rotation: float = DAY) -> worker_secret.Plan:
    return worker_secret.plan(
        found, uid="uid-1", now=now, rotation_seconds=rotation, interval_seconds=INTERVAL
    )


def test_a_pass_keeps_the_password_until_its_rotation_is_due() -> None:
    p1 = acl.digest("p1")
    assert plan(secret(), now=1000.0 + DAY - 1) == worker_secret.Plan(digests=(p1,))
    assert plan(secret(), now=1000.0 + DAY) == worker_secret.Plan(digests=(p1,), rotate=True)
    assert plan(secret(), now=1000.0 + 10 * DAY, rotation=0) == worker_secret.Plan(digests=(p1,))
    assert plan(secret(rotated_at=None), now=5.0) == worker_secret.Plan(digests=(p1,), rotate=True)


def test_a_replaced_password_stays_one_interval_then_is_forgotten() -> None:
    p2, p1 = acl.digest("p2"), acl.digest("p1")
    rotated = secret(password="p2", rotated_at=1000.0, previous=p1)
    assert plan(rotated, now=1000.0) == worker_secret.Plan(digests=(p2, p1))
    assert plan(rotated, now=1000.0 + INTERVAL - 1) == worker_secret.Plan(digests=(p2, p1))
    assert plan(rotated, now=1000.0 + INTERVAL) == worker_secret.Plan(digests=(p2,), forget_previous=True)


def test_a_secret_of_an_earlier_swarm_or_without_a_password_gets_a_new_one() -> None:
    assert plan(secret(owner="uid-0"), now=1001.0) == worker_secret.Plan(
        digests=(acl.digest("p1"),), rotate=True
    )
    assert plan(secret(password=""), now=1001.0) == worker_secret.Plan(digests=(), rotate=True)


def test_whose_secret_it_is() -> None:
    assert worker_secret.kind_of(secret()) == "ours"
    assert worker_secret.kind_of(secret(labelled=False)) == "foreign"
    assert worker_secret.kind_of(secret(labelled=False, supplied=True)) == "supplied"
    incomplete = worker_secret.supplied(SWARM, secret(supplied=True))
    assert (incomplete.ready, incomplete.reason) == (False, "SuppliedIncomplete")
    assert "username, url" in incomplete.message


def test_the_secret_carries_what_a_worker_reads_owned_by_its_swarm() -> None:
    content = worker_secret.Content(
        address=worker_secret.Address(url="", mode="sentinel", sentinels="s0:26379", master="m"),
        prefix="pfx",
        ca="-----BEGIN CERTIFICATE-----\n",
    )
    body = worker_secret.secret_body(swarm=SWARM, data=content.data(username="u", password="pw"), at=0.0)
    metadata = body["metadata"]
    assert (metadata["name"], metadata["namespace"]) == ("swarm-worker-redis-ci", "team-a")
    assert metadata["ownerReferences"] == [
        {
            "apiVersion": "swarm.agentihooks.io/v1alpha1",
            "kind": "Swarm",
            "name": "ci",
            "uid": "uid-1",
            "controller": True,
        }
    ]
    assert metadata["labels"][labels.CREDENTIAL] == "ci"
    assert metadata["annotations"] == {labels.ROTATED_AT: "1970-01-01T00:00:00Z"}
    decoded = {k: base64.b64decode(v).decode() for k, v in body["data"].items()}
    assert decoded == {
        "username": "u",
        "password": "pw",
        "prefix": "pfx",
        "mode": "sentinel",
        "sentinels": "s0:26379",
        "sentinel-master": "m",
        "ca.crt": "-----BEGIN CERTIFICATE-----\n",
    }


def test_a_worker_reads_its_files_and_the_variables_override_them(tmp_path: Path) -> None:
    for key, value in {
        "url": "redis://r:6379/0",
        "username": "u",
        "password": "p1\n",
        "ca.crt": "CA",
    }.items():
        (tmp_path / key).write_text(value)
    found = credential.load({labels.CREDENTIAL_ENV: str(tmp_path)})
    assert found == credential.Credential(
        url="redis://r:6379/0", username="u", password="p1", ca_file=str(tmp_path / "ca.crt")
    )
    assert "p1" not in repr(found)
    overridden = credential.load(
        {labels.CREDENTIAL_ENV: str(tmp_path), "AGENTIHOOKS_SWARM_WORKER_REDIS_PASSWORD": "p2"}
    )
    assert overridden is not None and overridden.password == "p2"
    assert credential.load({}) is None
    assert credential.load({labels.CREDENTIAL_ENV: str(tmp_path / "absent")}) is None
    with pytest.raises(errors.InvalidCredential, match="both a username and a password"):
        credential.load({"AGENTIHOOKS_SWARM_WORKER_REDIS_PASSWORD": "p"})
    with pytest.raises(errors.InvalidCredential, match="no 'url'"):
        credential.load(
            {"AGENTIHOOKS_SWARM_WORKER_REDIS_USERNAME": "u", "AGENTIHOOKS_SWARM_WORKER_REDIS_PASSWORD": "p"}
        )


def test_a_worker_pod_mounts_the_credential_optional_and_read_only() -> None:
    attempt = model.Attempt(namespace="team-a", slug="ci", execution="e1", generation=1, owner_uid="u-1")
    worker = resources.WorkerTemplate(
        image="worker:1", env=[{"name": "AGENTIHOOKS_SWARM_WORKER_REDIS", "value": "/x"}]
    )
    body = pod_template.pod_body(attempt=attempt, worker=worker, credential="swarm-worker-redis-ci")
    [container] = body["spec"]["containers"]
    assert body["spec"]["volumes"][-1] == {
        "name": "worker-redis",
        "secret": {"secretName": "swarm-worker-redis-ci", "optional": True},
    }
    assert container["volumeMounts"][-1] == {
        "name": "worker-redis",
        "mountPath": "/etc/agentihooks/redis",
        "readOnly": True,
    }
    # The operator's entry comes last, so it is the one a container sees.
    assert container["env"][-1] == {
        "name": "AGENTIHOOKS_SWARM_WORKER_REDIS",
        "value": "/etc/agentihooks/redis",
    }
    plain = pod_template.pod_body(attempt=attempt, worker=worker)
    assert [v["name"] for v in plain["spec"]["volumes"]] == ["grant"]
