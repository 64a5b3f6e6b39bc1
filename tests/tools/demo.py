"""``make demo``: the feature end to end on the local control plane, in about half a minute.

It starts (or reuses, after ``make cluster-up``) the local control plane and a redis-server,
creates an Execution for a project outside the Swarm's registration, plants its worker Pod as a
launch that stopped before recording its hand leaves it (owned by the Execution), after the worker
printed ``worker startup refused: planted kind refusal`` and exited 78, and runs the operator as
users do (``python -m agentihooks_swarm run``). The operator adopts the Pod, the hand is refused
(project_unpermitted), launch removal stores the evidence and deletes the Pod, and the demo prints
what a user would look at:
``kubectl get executions``, the Execution's events, that the Pod is gone, and the stored record
read with the documented read command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentihooks_swarm.kubernetes import owners
from tests.support import crds, pods, signals
from tests.support.cluster import ControlPlane, build, named_cluster, start
from tests.support.operator_process import OperatorProcess
from tests.support.redis_server import RedisServer

NAMESPACE = "demo"
SLUG = "demo"
PLANTED = b"worker startup refused: planted kind refusal\n"
READ_COMMAND = """
import sys
from agentihooks_swarm.store import connect
store = connect()
print(store.redis.hget(store.key(sys.argv[1], "attempt-startup-diagnostics"), sys.argv[2]))
"""


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(
        [str(plane.bin_dir / "kubectl"), "--kubeconfig", str(plane.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def step(text: str, *, gap: bool = False) -> None:
    """A bold header; ``gap`` sets it off with a blank line (the record's sections)."""
    print(f"{chr(10) if gap else ''}\033[1m== {text}\033[0m", flush=True)


def wait(what: str, probe: Any, *, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout}s")
        time.sleep(0.2)


def demo(plane: ControlPlane, redis_url: str, workdir: Path) -> None:
    step("the CRDs and the namespace")
    crds.apply(plane)
    kubectl(plane, "create", "namespace", NAMESPACE, check=False)
    execution = f"refused-{int(time.time())}"
    pod = f"swarm-worker-{execution}-1"
    _apply(plane=plane, execution=execution)
    _plant_refused_worker(plane=plane, execution=execution, pod=pod)
    step("the operator (python -m agentihooks_swarm run)")
    operator = OperatorProcess(
        kubeconfig=plane.kubeconfig,
        redis_url=redis_url,
        namespace=NAMESPACE,
        log_path=workdir / "operator.log",
    )
    operator.start()
    print(f"operator running, log: {operator.log_path}")
    try:
        wait(
            "the pod to be removed",
            lambda: not kubectl(plane, "get", "pod", "-n", NAMESPACE, pod, "--ignore-not-found"),
        )
        _show_what_kubectl_shows(plane=plane, execution=execution, pod=pod)
        _show_the_record(redis_url=redis_url, execution=execution)
        print("\nThe refused worker's Pod is gone; its exit state and last log lines are in Redis.")
    finally:
        operator.stop()


def _apply(*, plane: ControlPlane, execution: str) -> None:
    """The Swarm and an Execution for a project it does not register: its hand will be refused."""
    step("a Swarm registered for 'registered-project', and an Execution for 'outside-project'")
    resources = f"""
apiVersion: swarm.agentihooks.io/v1alpha1
kind: Swarm
metadata: {{name: {SLUG}, namespace: {NAMESPACE}}}
spec:
  registration: {{projects: [registered-project]}}
  worker: {{image: {pods.WORKER_IMAGE}}}
---
apiVersion: swarm.agentihooks.io/v1alpha1
kind: Execution
metadata: {{name: {execution}, namespace: {NAMESPACE}}}
spec: {{swarm: {SLUG}, project: outside-project, task: {{goal: demo}}}}
"""
    kubectl(plane, "apply", "-f", "-", stdin=resources)


def _plant_refused_worker(*, plane: ControlPlane, execution: str, pod: str) -> None:
    """The Execution's worker Pod as a launch that stopped before recording its hand leaves it
    (owned by the Execution, holding the evidence finalizer), after the worker printed the refusal
    and exited 78, as kwok plays it. The operator, started next, adopts it."""
    step(f"a worker Pod that printed the refusal and exited 78: {pod}")
    pods.plant_log_blocking(cluster=plane, namespace=NAMESPACE, pod=pod, container="worker", content=PLANTED)
    uid = kubectl(plane, "get", "execution", "-n", NAMESPACE, execution, "-o", "jsonpath={.metadata.uid}")
    manifest = pods.worker_pod(
        name=pod,
        namespace=NAMESPACE,
        phase="Failed",
        exit_code=78,
        reason="Error",
        labels={
            "swarm.agentihooks.io/controller-owner": f"agentihooks-swarm-{SLUG}",
            "swarm.agentihooks.io/execution-id": execution,
            "swarm.agentihooks.io/generation": "1",
        },
        owner_references=[owners.execution_reference(name=execution, uid=uid.strip())],
        finalizers=[owners.EVIDENCE_FINALIZER],
    )
    kubectl(plane, "apply", "-f", "-", stdin=json.dumps(manifest))
    kubectl(
        plane,
        "wait",
        "-n",
        NAMESPACE,
        "--for=jsonpath={.status.phase}=Failed",
        f"pod/{pod}",
        "--timeout=60s",
    )
    print(kubectl(plane, "get", "pod", "-n", NAMESPACE, pod).rstrip())


def _events(plane: ControlPlane, execution: str, *columns: str) -> str:
    """``kubectl get events`` on the Execution, with ``-o …`` in ``columns`` when given."""
    selector = f"involvedObject.name={execution}"
    return kubectl(plane, "get", "events", "-n", NAMESPACE, "--field-selector", selector, *columns)


def _show_what_kubectl_shows(*, plane: ControlPlane, execution: str, pod: str) -> None:
    step("kubectl get executions")
    print(kubectl(plane, "get", "executions", "-n", NAMESPACE).rstrip())
    step(f"kubectl get pod {pod}")
    print(kubectl(plane, "get", "pod", "-n", NAMESPACE, pod, check=False).strip() or "(gone)")
    step(f"events on execution/{execution}")
    wait("the events", lambda: "StartupRefused" in _events(plane, execution))
    columns = "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message"
    print(_events(plane, execution, "-o", columns).rstrip())


def _show_the_record(*, redis_url: str, execution: str) -> None:
    """The stored record, read the two documented ways: the read command and ``records startup``."""
    step("the record, read with the documented command (python -c … SLUG EXECUTION)", gap=True)
    env = {**os.environ, "AGENTIHOOKS_SWARM_REDIS_URL": redis_url}
    raw = subprocess.run(
        [sys.executable, "-c", READ_COMMAND, SLUG, execution],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    print(raw.rstrip())
    step(f"python -m agentihooks_swarm records startup {SLUG} {execution}", gap=True)
    subprocess.run(
        [sys.executable, "-m", "agentihooks_swarm", "records", "startup", SLUG, execution],
        env=env,
        check=True,
    )


def main() -> int:
    signals.exit_on_sigterm()
    workdir = Path(tempfile.mkdtemp(prefix="agentihooks-swarm-demo-"))
    named = named_cluster()
    with RedisServer() as redis_server:
        if named is not None:
            demo(named, redis_server.url, workdir)
            return 0
        plane = start(workdir=workdir / "cluster", bin_dir=build(only="kwok"), out=sys.stderr)
        try:
            demo(plane, redis_server.url, workdir)
        finally:
            plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
