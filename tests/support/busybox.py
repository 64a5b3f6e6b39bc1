"""A restricted-compliant Pod running a shell script in busybox, for the tests on a real node (the
image is built offline and loaded by ``tests/support/images.py``)."""

from __future__ import annotations

from typing import Any

from tests.support import images
from tests.support.fixtures_scene import Scene
from tests.support.operator_process import OperatorProcess


def pod(name: str, script: str, *, init: str | None = None, memory: str | None = None) -> dict[str, Any]:
    """A restricted-compliant Pod running ``script`` in busybox (and ``init`` as an init container)."""

    def container(container_name: str, command: str) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "name": container_name,
            "image": images.BUSYBOX_REF,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", command],
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
        }
        if memory:
            spec["resources"] = {"limits": {"memory": memory}}
        return spec

    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container("worker", script)],
    }
    if init is not None:
        spec["initContainers"] = [container("init", init)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def run_script(
    scene: Scene, *, swarm: str, execution: str, script: str, env: dict[str, str] | None = None
) -> OperatorProcess:
    """The operator started (with ``env``), Swarm ``swarm`` whose workers run ``script`` in busybox
    (``sh -c``), and ``execution`` of it: its worker is handed its grant and runs the script."""
    process = scene.start(env=env)
    await scene.swarm(name=swarm, image=images.BUSYBOX_REF, command=["sh", "-c", script])
    await scene.execution(name=execution, swarm=swarm)
    return process
