"""The capture against real containers: the operator (as a process, as users run ``kopf run``)
reads what a real kubelet serves, stores it, and only then deletes the Pod.

Workers are planted under the name and labels the launch adopts, owned by an Execution for a
project outside the Swarm's registration, which makes the hand refuse, so launch removal captures
them; the last test lets the hand succeed and the worker fail on its own, for final cleanup.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from agentihooks_swarm.kubernetes import labels, owners
from tests.support import images, pods, watching
from tests.support.busybox import pod, run_script
from tests.support.fixtures_scene import Scene

PREFIX = "agentihooks-swarm"
SLUG = "real"


async def record(redis_url: str, name: str, execution: str) -> Any:
    return await watching.stored(redis_url, slug=SLUG, name=name, execution=execution)


async def refuse(
    scene: Scene, *, execution: str, worker: dict[str, Any], phase: pods.Phase = "Failed"
) -> dict[str, Any]:
    """Plant ``worker`` as the attempt's Pod, let it reach ``phase``, refuse the hand, and return
    the launch-removal record once the Pod is gone."""
    api, namespace = scene.api, scene.namespace
    name = labels.worker_pod_name(execution=execution, generation=1)
    # The Execution first: its UID owns the Pod, as the operator's own create would make it.
    await scene.execution(name=execution, swarm=SLUG, project="outside")
    uid = str((await scene.get(execution))["metadata"]["uid"])
    worker["metadata"] = {
        "name": name,
        "labels": labels.attempt(slug=SLUG, execution=execution, generation=1),
        "ownerReferences": [owners.execution_reference(name=execution, uid=uid)],
        "finalizers": [owners.EVIDENCE_FINALIZER],
    }
    manifest: Any = worker
    await client.CoreV1Api(api).create_namespaced_pod(namespace, manifest)
    await pods.wait_for_phase(api, namespace=namespace, name=name, phase=phase, timeout=60)
    process = scene.start()
    await scene.swarm(name=SLUG, projects=["registered"], image=images.BUSYBOX_REF)

    async def gone() -> bool:
        return not await watching.pod_exists(api, namespace=namespace, name=name)

    await watching.eventually(gone, what=f"{name} to be deleted", operator=process, timeout=60)
    stored = await record(process.redis_url, "attempt-startup-diagnostics", execution)
    assert stored is not None, process.tail()
    assert stored["pod"] == name
    return dict(stored)


@pytest.mark.pod_security("restricted")
async def test_a_long_mixed_log_with_invalid_utf8_keeps_its_newest_lines(scene: Scene) -> None:
    # 300 numbered lines, every tenth on stderr, line 299 with bytes that are not UTF-8.
    script = (
        "i=1; while [ $i -le 300 ]; do "
        "if [ $i -eq 299 ]; then printf 'line %03d bad \\377\\376 bytes\\n' $i; "
        'elif [ $((i % 10)) -eq 0 ]; then echo "line $(printf %03d $i) on stderr" >&2; '
        'else echo "line $(printf %03d $i)"; fi; i=$((i+1)); done; exit 78'
    )
    stored = await refuse(scene, execution="long-log", worker=pod("w", script))
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
    scene: Scene,
) -> None:
    worker = pod("w", "echo never runs", init="echo 'init: cannot fetch the grant'; exit 3")
    stored = await refuse(scene, execution="init-fails", worker=worker)
    # The main container never started: the kubelet answers 400 "waiting to start" for its log,
    # and it is not a terminated container, so the capture lists the init container only.
    [container] = stored["startup"]["containers"]
    assert container["name"] == "init"
    assert container["terminated"]["exitCode"] == 3
    assert container["log"].rstrip().endswith("init: cannot fetch the grant")


@pytest.mark.pod_security("restricted")
async def test_a_worker_killed_by_its_memory_limit(scene: Scene) -> None:
    worker = pod("w", "echo allocating; exec dd if=/dev/zero of=/dev/null bs=64M count=4", memory="16Mi")
    stored = await refuse(scene, execution="oom", worker=worker)
    [container] = stored["startup"]["containers"]
    assert (container["terminated"]["exitCode"], container["terminated"]["reason"]) == (137, "OOMKilled")
    assert container["log"].rstrip().endswith("allocating")


async def test_a_worker_failing_after_the_hand_goes_through_final_cleanup(scene: Scene) -> None:
    script = "echo 'worker: grant taken'; sleep 2; echo 'worker: the model refused the task' >&2; exit 78"
    process = await run_script(scene, swarm=SLUG, execution="late", script=script)
    status = await scene.until_phase("late", "Done", process=process, timeout=90)
    pod_name = labels.worker_pod_name(execution="late", generation=1)
    # The hand names the Pod it was given to by UID (podUid), next to the spec's handed.
    assert status["hand"] == {"handed": True, "podUid": status["hand"]["podUid"], "terminal": False}
    assert status["hand"]["podUid"]
    assert status["outcome"] == "failed"
    assert status["cleanup"]["pods"] == {pod_name: "deleted"}
    assert not await watching.pod_exists(scene.api, namespace=scene.namespace, name=pod_name)
    retained = await record(process.redis_url, "attempt-retained", "late")
    [entry] = retained["removed"]["pods"]
    assert entry["outcome"] == "deleted" and "log_reads" not in entry
    [container] = entry["startup"]["containers"]
    assert (container["terminated"]["exitCode"], container["terminated"]["reason"]) == (78, "Error")
    texts = [line.split(" ", 1)[1] for line in container["log"].splitlines()]
    assert texts == ["worker: grant taken", "worker: the model refused the task"]
    assert await record(process.redis_url, "attempt-startup-diagnostics", "late") is None
