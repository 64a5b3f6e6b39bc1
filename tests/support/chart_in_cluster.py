"""The chart installed on the real node as users run it, and commands run against it: ``helm`` and
``kubectl`` with the cluster's credentials, and ``python`` in a Pod's container (shared by the
realnode tests of the chart and of the records reader)."""

from __future__ import annotations

import json
import os
import subprocess
import time

from tests.support import images, proof_script
from tests.support.cluster import ControlPlane

CHART = proof_script.REPO / "charts" / "agentihooks-swarm"
#: The chart's values that point it at the images loaded into the node (nothing is pulled).
IMAGE_VALUES = (
    "--set", f"image.repository={images.OPERATOR_REF.rsplit(':', 1)[0]}",
    "--set", f"image.tag={images.OPERATOR_REF.rsplit(':', 1)[1]}",
    "--set", "image.pullPolicy=Never",
    "--set", f"redis.bundled.image.repository={images.REDIS_REF.rsplit(':', 1)[0]}",
    "--set", f"redis.bundled.image.tag={images.REDIS_REF.rsplit(':', 1)[1]}",
    "--set", "redis.bundled.image.pullPolicy=Never",
)  # fmt: skip


def run(plane: ControlPlane, tool: str, *args: str, timeout: float = 240, check: bool = True) -> str:
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "PATH": f"{plane.bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        [str(plane.bin_dir / tool), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"{tool} {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def install(plane: ControlPlane, *, namespace: str, release: str, values: tuple[str, ...] = ()) -> None:
    done = run(
        plane, "helm", "install", release, str(CHART), "--namespace", namespace, *IMAGE_VALUES, *values,
        "--set", "operator.cleanupIntervalSeconds=2", "--wait", "--timeout", "180s", check=False,
    )  # fmt: skip
    if "STATUS: deployed" not in done:
        pods = run(plane, "kubectl", "get", "pods", "-A", "-o", "wide", check=False)
        described = run(plane, "kubectl", "describe", "pods", "-n", namespace, check=False)
        raise AssertionError(f"helm install {release} did not deploy:\n{done}\n{pods}\n{described[-6000:]}")


def lease_holder_pod(plane: ControlPlane, *, namespace: str, release: str, other_than: str = "") -> str:
    """The controller Pod holding the Lease (its identity is HOSTNAME-PID; a Pod's hostname is its name);
    with ``other_than``, once a Pod other than that one holds it."""
    deadline = time.monotonic() + 60
    while True:
        out = run(
            plane,
            "kubectl",
            "get",
            "lease",
            f"{release}-controller",
            "-n",
            namespace,
            "-o",
            "json",
            check=False,
        )
        holder = json.loads(out).get("spec", {}).get("holderIdentity") if out else None
        if holder and str(holder).rsplit("-", 1)[0] != other_than:
            return str(holder).rsplit("-", 1)[0]
        assert time.monotonic() < deadline, (
            f"no controller {'but ' + other_than + ' ' if other_than else ''}took the Lease in 60s"
        )
        time.sleep(0.5)


#: What the read command prints while the Redis Service has no endpoint in kube-proxy's rules yet:
#: a Pod just became Ready, and the EndpointSlice and kube-proxy's next sync follow a moment later.
SERVICE_NOT_YET: tuple[str, ...] = ("Connection refused", "Error 111 connecting")


def controller_python(
    plane: ControlPlane, *, namespace: str, target: str, script: str, args: tuple[str, ...]
) -> str:
    """``python -c script args`` in the controller container of ``target`` (a Pod, or
    ``deployment/NAME``). While the Redis Service does not route yet (its Pod just became Ready),
    it is run again, for up to 60 s."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return run(
                plane, "kubectl", "exec", "-n", namespace, target, "-c", "controller", "--",
                "python", "-c", script, *args,
            )  # fmt: skip
        except AssertionError as failed:
            if time.monotonic() > deadline or not any(s in str(failed) for s in SERVICE_NOT_YET):
                raise
            time.sleep(1)
