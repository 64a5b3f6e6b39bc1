"""A real node leaves nothing on the machine: not after a clean stop, and not after a run that
was killed (the next start, or the next record of the machine, cleans that up). Runs before the
session's real node starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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
    before = host.baseline()

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


def test_a_claim_left_by_a_killed_run_is_released_before_the_machine_is_recorded(tmp_path: Path) -> None:
    """A run killed while its real node was up leaves its claim, the address on ``lo`` and the
    sysctls behind. The next run must compare what its node puts back with the machine before the
    killed run, not with those leftovers (its node's start releases them)."""
    before = host.baseline()
    ghost = tmp_path / "ghost"
    claiming = (
        "from pathlib import Path; from tests.support.cluster import host; "
        f"host.claim(workdir=Path({str(ghost)!r}))"
    )
    try:
        # The claiming process exits at once: a run killed right after its claim.
        subprocess.run([sys.executable, "-c", claiming], check=True, cwd=Path(__file__).parents[2])
        assert host.claimed_workdir() == ghost
        assert host.snapshot() != before

        assert host.baseline() == before
        assert not host.CLAIM_FILE.exists()
        assert host.leftovers(workdir=ghost) == []
    finally:
        host.release(workdir=ghost)
