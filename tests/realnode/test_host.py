"""A real node leaves nothing on the machine: not after a clean stop, and not after a run that
was killed (the next start cleans that up). Runs before the session's real node starts."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.support import images
from tests.support.cluster import control_plane, host, nodes
from tests.support.cluster.control_plane import ControlPlane
from tests.support.cluster.processes import pid_alive


def sleeping_pod(plane: ControlPlane, name: str) -> None:
    plane.request_json(
        "POST",
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": images.BUSYBOX_REF, "command": ["sleep", "3600"]}],
            },
        },
    )
    deadline = time.monotonic() + 60
    while (
        plane.request_json("GET", f"/api/v1/namespaces/default/pods/{name}").get("status", {}).get("phase")
        != "Running"
    ):
        assert time.monotonic() < deadline, f"{name} is not Running after 60s"
        time.sleep(0.2)


def test_a_killed_real_node_is_cleaned_up_by_the_next_start(tmp_path: Path) -> None:
    bin_dir = control_plane.build()
    node_images = nodes.real_node_images()
    before = host.snapshot()

    killed = control_plane.start(
        workdir=tmp_path / "killed", bin_dir=bin_dir, node="real", images=node_images
    )
    sleeping_pod(killed, "survivor")
    # SIGKILL everything the run started, as a killed test run would: the container, its shim,
    # its mounts, the cgroups, the nftables rules, the sysctls and the lo address stay behind.
    for child in killed.children:
        os.killpg(child.pid, signal.SIGKILL)
    for child in killed.children:
        assert child.popen is not None
        child.popen.wait(timeout=10)
    left = host.leftovers(workdir=killed.workdir)
    assert any(item.startswith("mount ") for item in left), left
    assert any(item.startswith("processes ") for item in left), left  # the container's shim
    assert host.snapshot() != before

    fresh = control_plane.start(workdir=tmp_path / "fresh", bin_dir=bin_dir, node="real", images=node_images)
    try:
        assert host.leftovers(workdir=killed.workdir) == [], host.leftovers(workdir=killed.workdir)
        sleeping_pod(fresh, "works")
    finally:
        fresh.stop()
    assert host.leftovers(workdir=fresh.workdir) == []
    assert host.snapshot() == before
    assert not any(pid_alive(child.pid) for child in fresh.children)
