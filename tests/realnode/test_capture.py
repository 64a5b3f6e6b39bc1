"""The capture against real containers: the operator (as a process, as users run ``kopf run``)
reads what a real kubelet serves, stores it, and only then deletes the Pod.

Workers are planted under the name and labels the launch adopts, then an Execution for a project
outside the Swarm's registration makes the hand refuse, so launch removal captures them; the last
test lets the hand succeed and the worker fail on its own, for final cleanup.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels
from tests.support import builders, images, pods, watching
from tests.support.busybox import pod
from tests.support.cluster import ControlPlane
from tests.support.fixtures_operator import OperatorFactory

PREFIX = "agentihooks-swarm"
SLUG = "real"


async def record(redis_url: str, name: str, execution: str) -> Any:
    return await watching.stored(redis_url, slug=SLUG, name=name, execution=execution)


async def refuse(
    api: client.ApiClient,
    cluster: ControlPlane,
    operator: OperatorFactory,
    *,
    namespace: str,
    execution: str,
    worker: dict[str, Any],
    phase: pods.Phase = "Failed",
) -> dict[str, Any]:
    """Plant ``worker`` as the attempt's Pod, let it reach ``phase``, refuse the hand, and return
    the launch-removal record once the Pod is gone."""
    name = labels.worker_pod_name(execution=execution, generation=1)
    worker["metadata"] = {
        "name": name,
        "labels": labels.attempt(slug=SLUG, execution=execution, generation=1),
    }
    manifest: Any = worker
    await client.CoreV1Api(api).create_namespaced_pod(namespace, manifest)
    await pods.wait_for_phase(api, namespace=namespace, name=name, phase=phase, timeout=60)
    process = operator(kubeconfig=cluster.kubeconfig, namespace=namespace)
    await watching.create(
        api, builders.swarm(name=SLUG, namespace=namespace, projects=["registered"], image=images.BUSYBOX_REF)
    )
    await watching.create(
        api, builders.execution(name=execution, namespace=namespace, swarm=SLUG, project="outside")
    )

    async def gone() -> bool:
        return not await watching.pod_exists(api, namespace=namespace, name=name)

    await watching.eventually(gone, what=f"{name} to be deleted", operator=process, timeout=60)
    stored = await record(process.redis_url, "attempt-startup-diagnostics", execution)
    assert stored is not None, process.tail()
    assert stored["pod"] == name
    return dict(stored)


@pytest.mark.pod_security("restricted")
async def test_a_long_mixed_log_with_invalid_utf8_keeps_its_newest_lines(
    admin_api: client.ApiClient, control_plane: ControlPlane, namespace: str, operator: OperatorFactory
) -> None:
    # 300 numbered lines, every tenth on stderr, line 299 with bytes that are not UTF-8.
    script = (
        "i=1; while [ $i -le 300 ]; do "
        "if [ $i -eq 299 ]; then printf 'line %03d bad \\377\\376 bytes\\n' $i; "
        'elif [ $((i % 10)) -eq 0 ]; then echo "line $(printf %03d $i) on stderr" >&2; '
        'else echo "line $(printf %03d $i)"; fi; i=$((i+1)); done; exit 78'
    )
    stored = await refuse(
        admin_api, control_plane, operator, namespace=namespace, execution="long-log", worker=pod("w", script)
    )
    startup = stored["startup"]
    assert startup["phase"] == "Failed"
    [container] = startup["containers"]
    assert container["name"] == "worker"
    assert (container["terminated"]["exitCode"], container["terminated"]["reason"]) == (78, "Error")
    lines = container["log"].splitlines()
    assert len(lines) == 200  # the spec's last 200 lines
    texts = [line.split(" ", 1)[1] for line in lines]
    # The runtime reads stdout and stderr from two pipes, so a stderr line can land in the log a
    # line or more after the stdout line written just after it (a clean-clone run saw "line 100
    # on stderr" after "line 101"). What holds whatever the interleaving: the 200 newest lines of
    # the log are the newest lines of each stream, each stream in its own order.
    stderr = [int(t.split()[1]) for t in texts if t.endswith("on stderr")]
    stdout = [int(t.split()[1]) for t in texts if not t.endswith("on stderr")]
    stderr_stream = list(range(10, 301, 10))
    stdout_stream = [i for i in range(1, 301) if i % 10]
    assert stderr == stderr_stream[len(stderr_stream) - len(stderr) :], texts
    assert stdout == stdout_stream[len(stdout_stream) - len(stdout) :], texts
    assert len(stderr) >= 10 and "line 300 on stderr" in texts, texts  # both streams are kept
    assert "line 299 bad \ufffd\ufffd bytes" in texts, texts  # invalid UTF-8 replaced


@pytest.mark.pod_security("restricted")
async def test_an_init_container_failure_is_captured_and_the_waiting_main_container_is_not(
    admin_api: client.ApiClient, control_plane: ControlPlane, namespace: str, operator: OperatorFactory
) -> None:
    worker = pod("w", "echo never runs", init="echo 'init: cannot fetch the grant'; exit 3")
    stored = await refuse(
        admin_api, control_plane, operator, namespace=namespace, execution="init-fails", worker=worker
    )
    # The main container never started: the kubelet answers 400 "waiting to start" for its log,
    # and it is not a terminated container, so the capture lists the init container only.
    [container] = stored["startup"]["containers"]
    assert container["name"] == "init"
    assert container["terminated"]["exitCode"] == 3
    assert container["log"].rstrip().endswith("init: cannot fetch the grant")


@pytest.mark.pod_security("restricted")
async def test_a_worker_killed_by_its_memory_limit(
    admin_api: client.ApiClient, control_plane: ControlPlane, namespace: str, operator: OperatorFactory
) -> None:
    worker = pod("w", "echo allocating; exec dd if=/dev/zero of=/dev/null bs=64M count=4", memory="16Mi")
    stored = await refuse(
        admin_api, control_plane, operator, namespace=namespace, execution="oom", worker=worker
    )
    [container] = stored["startup"]["containers"]
    assert (container["terminated"]["exitCode"], container["terminated"]["reason"]) == (137, "OOMKilled")
    assert container["log"].rstrip().endswith("allocating")


async def test_a_worker_failing_after_the_hand_goes_through_final_cleanup(
    admin_api: client.ApiClient, control_plane: ControlPlane, namespace: str, operator: OperatorFactory
) -> None:
    process = operator(kubeconfig=control_plane.kubeconfig, namespace=namespace)
    script = "echo 'worker: grant taken'; sleep 2; echo 'worker: the model refused the task' >&2; exit 78"
    await watching.create(
        admin_api,
        builders.swarm(
            name=SLUG, namespace=namespace, image=images.BUSYBOX_REF, command=["sh", "-c", script]
        ),
    )
    await watching.create(admin_api, builders.execution(name="late", namespace=namespace, swarm=SLUG))

    async def done() -> dict[str, Any] | None:
        status: dict[str, Any] = (await watching.execution(admin_api, namespace=namespace, name="late")).get(
            "status"
        ) or {}
        return status if status.get("phase") == "Done" else None

    status = await watching.eventually(done, what="the attempt to be Done", operator=process, timeout=90)
    pod_name = labels.worker_pod_name(execution="late", generation=1)
    assert status["hand"] == {"handed": True}
    assert status["outcome"] == "failed"
    assert status["cleanup"]["pods"] == {pod_name: "deleted"}
    assert not await watching.pod_exists(admin_api, namespace=namespace, name=pod_name)
    retained = await record(process.redis_url, "attempt-retained", "late")
    [entry] = retained["removed"]["pods"]
    assert entry["outcome"] == "deleted" and "log_reads" not in entry
    [container] = entry["startup"]["containers"]
    assert (container["terminated"]["exitCode"], container["terminated"]["reason"]) == (78, "Error")
    texts = [line.split(" ", 1)[1] for line in container["log"].splitlines()]
    assert texts == ["worker: grant taken", "worker: the model refused the task"]
    assert await record(process.redis_url, "attempt-startup-diagnostics", "late") is None
