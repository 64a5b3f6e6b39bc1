"""The records reader as users run it on the real node: the chart installed with its reader Pod,
people bound to the Role RELEASE-records-reader read a record in that Pod (the operator's image,
the bundled Redis, the read-only user the controller made), and get nothing else: no exec into
the controller, no token in the reader, no write to Redis. ``records forget`` in the controller
leaves its Event, with the chart's real RBAC."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.support.chart_in_cluster import SERVICE_NOT_YET, controller_python, install, lease_holder_pod, run
from tests.support.cluster import ControlPlane

RELEASE = "ahr"
SLUG = "readme"
#: A record and its owner claim, written as the controller would (in its container).
PLANT = """
import json, sys
from agentihooks_swarm.store import connect
store = connect()
slug, execution, namespace = sys.argv[1:4]
record = json.dumps({"pod": "p", "uid": "u"})
store.redis.hset(store.key(slug, "attempt-startup-diagnostics"), execution, record)
store.redis.hset(store.key(slug, "attempt-retained"), execution, json.dumps({"execution": execution}))
owner = {"uid": "uid-" + execution, "namespace": namespace, "at": "2026-12-04T00:00:00Z"}
store.redis.hset(store.key(slug, "execution-owners"), execution, json.dumps(owner))
"""
#: What the reader may not do, each a line of its own: print the exception's class or "done".
TRY = """
import os
from agentihooks_swarm.store import connect
store = connect()
print("token", os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token"))
for name, attempt in [("hset", lambda: store.redis.hset(store.key("readme", "attempt-finals"), "e", "{}")),
                      ("flushall", store.redis.flushall), ("keys", lambda: store.redis.keys("*")),
                      ("config", lambda: store.redis.config_get("*"))]:
    try:
        attempt()
        print(name, "done")
    except Exception as e:
        print(name, type(e).__name__)
"""


def attempt(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl ARGS`` that may fail: its exit status and what it said."""
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
    command = [str(plane.bin_dir / "kubectl"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def as_reader(plane: ControlPlane, namespace: str, *args: str, check: bool = True) -> str:
    """``kubectl exec`` as the ServiceAccount ``reader``, bound to the reader's Role by the chart."""
    who = f"system:serviceaccount:{namespace}:reader"
    return run(plane, "kubectl", "--as", who, "exec", "-n", namespace, *args, check=check)


#: The Redis users, as the controller sees them.
USERS = """
from agentihooks_swarm.store import connect
print(connect().redis.acl_users())
"""


def controller_side(plane: ControlPlane, namespace: str) -> str:
    """Why the reader may have no user yet: the controller's Redis users and its log's last lines."""
    target = f"deployment/{RELEASE}-controller"
    users = controller_python(plane, namespace=namespace, target=target, script=USERS, args=())
    log = run(plane, "kubectl", "logs", "-n", namespace, target, "-c", "controller", "--tail=60", check=False)
    return f"Redis users: {users}\ncontroller log:\n{log}"


def read_as_reader(plane: ControlPlane, namespace: str) -> str:
    """The record through ``records startup`` in the reader Pod, once the controller has made its
    Redis user (its leader's first pass) and the Redis Service routes."""
    deadline = time.monotonic() + 90
    pod = f"{RELEASE}-records-0"
    while True:
        try:
            return as_reader(
                plane, namespace, pod, "--", "python", "-m", "agentihooks_swarm", "records", "startup",
                SLUG, "e1", "--full",
            )  # fmt: skip
        except AssertionError as failed:
            waiting = ("WRONGPASS", "AuthenticationError", *SERVICE_NOT_YET)
            if time.monotonic() > deadline or not any(s in str(failed) for s in waiting):
                raise AssertionError(f"{failed}\n{controller_side(plane, namespace)}") from failed
            time.sleep(2)


@pytest.mark.pod_security("restricted")
def test_the_reader_pod_reads_records_and_nothing_else(
    control_plane: ControlPlane, namespace: str, swarm_crds: list[str]
) -> None:
    plane, workers = control_plane, f"{namespace}-workers"
    run(plane, "kubectl", "create", "serviceaccount", "reader", "-n", namespace)
    readers = ("--set", "records.readers[0].kind=ServiceAccount", "--set", "records.readers[0].name=reader")
    install(
        plane,
        namespace=namespace,
        release=RELEASE,
        values=(*readers, "--set", f"records.readers[0].namespace={namespace}"),
    )
    try:
        controller = f"deployment/{RELEASE}-controller"
        controller_python(
            plane, namespace=namespace, target=controller, script=PLANT, args=(SLUG, "e1", workers)
        )

        assert json.loads(read_as_reader(plane, namespace)) == {"pod": "p", "uid": "u"}
        tried = as_reader(plane, namespace, f"{RELEASE}-records-0", "--", "python", "-c", TRY)
        assert tried.split("\n")[:5] == [
            "token False",
            "hset NoPermissionError",
            "flushall NoPermissionError",
            "keys NoPermissionError",
            "config NoPermissionError",
        ], tried
        # The reader's Role reaches no other Pod: not the controller.
        leader = lease_holder_pod(plane, namespace=namespace, release=RELEASE)
        who = f"system:serviceaccount:{namespace}:reader"
        refused = attempt(
            plane, "--as", who, "exec", "-n", namespace, leader, "-c", "controller", "--", "true"
        )
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused
        for pod, allowed in ((leader, "no"), (f"{RELEASE}-records-0", "yes")):
            can = attempt(
                plane,
                "auth",
                "can-i",
                "create",
                f"pods/{pod}",
                "--subresource=exec",
                "-n",
                namespace,
                "--as",
                who,
            )
            assert can.stdout.strip() == allowed, (pod, can)

        # forget stays with the controller: --force refused by default, then an Event naming who asked.
        forget: tuple[str, ...] = (
            "exec",
            "-n",
            namespace,
            controller,
            "-c",
            "controller",
            "--",
            "python",
            "-m",
            "agentihooks_swarm",
        )
        forget += ("records", "forget", SLUG, "e1", "--requested-by", "alice")
        forced = attempt(plane, *forget, "--force")
        assert forced.returncode == 1 and "ALLOW_FORCE_FORGET" in forced.stderr, forced
        freed = attempt(plane, *forget)
        assert freed.returncode == 0, freed
        assert "Event RecordsForgotten left on Swarm" in freed.stdout and "the name is free" in freed.stdout
        listed = run(plane, "kubectl", "get", "events", "-n", workers, "--field-selector",
                     f"involvedObject.name={SLUG}", "-o", "json")  # fmt: skip
        [event] = [e for e in json.loads(listed)["items"] if e["reason"] == "RecordsForgotten"]
        assert event["type"] == "Warning" and "'alice'" in event["message"] and "'e1'" in event["message"]
    finally:
        run(plane, "helm", "uninstall", RELEASE, "--namespace", namespace, "--wait", check=False)
