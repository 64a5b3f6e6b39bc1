"""Getting started on the real node, as a newcomer follows it: the chart installed by the page's
block, the example applied, and its record read with the page's own ``kubectl exec … records
retained`` block (marked ``<!-- docs: runs-on-node -->``), which prints what the page shows.

Substituted, besides ``doc_blocks.substitutions``: the images (the node's own, nothing pulled) and
the example's busybox (the node's busybox image).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import doc_blocks, images
from tests.support.chart_in_cluster import IMAGE_VALUES, SERVICE_NOT_YET, run
from tests.support.cluster import ControlPlane
from tests.support.doc_blocks import REPO, Block, runnable, substitutions, user_pages

PAGE = REPO / "docs" / "getting-started.md"
INSTALL = "helm install agentihooks-swarm charts/agentihooks-swarm"


def run_block(
    block: Block, *, plane: ControlPlane, namespace: str, home: Path
) -> subprocess.CompletedProcess[str]:
    replacements = {**substitutions(namespace=namespace), INSTALL: f"{INSTALL} {' '.join(IMAGE_VALUES)}"}
    return doc_blocks.run(
        block,
        kubeconfig=plane.kubeconfig,
        bin_dir=plane.bin_dir,
        image=images.OPERATOR_REF,
        replacements=replacements,
        home=home,
        timeout=300,
    )


def until_done(plane: ControlPlane, workers: str) -> None:
    deadline = time.monotonic() + 180
    while True:
        phase = run(
            plane, "kubectl", "get", "execution", "-n", workers, "example-1", "-o", "jsonpath={.status.phase}"
        )
        if phase == "Done":
            return
        assert time.monotonic() < deadline, f"example-1 is {phase!r} after 180 s"
        time.sleep(2)


def read(block: Block, *, plane: ControlPlane, namespace: str, home: Path) -> str:
    """The page's read block, again while the reader has no Redis user yet or the Service no route."""
    deadline = time.monotonic() + 90
    while True:
        done = run_block(block, plane=plane, namespace=namespace, home=home)
        if done.returncode == 0:
            return done.stdout
        waiting = ("WRONGPASS", "AuthenticationError", *SERVICE_NOT_YET)
        said = done.stdout + done.stderr
        assert time.monotonic() < deadline and any(s in said for s in waiting), f"{block.where()}:\n{said}"
        time.sleep(2)


@pytest.mark.pod_security("restricted")
def test_a_newcomer_reads_the_examples_record_with_the_pages_command(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    [install] = [b for b in runnable([PAGE]) if INSTALL in b.text]
    [reading] = runnable(user_pages(), mark="runs-on-node")
    workers = f"{namespace}-workers"
    try:
        installed = run_block(install, plane=control_plane, namespace=namespace, home=tmp_path)
        assert "successfully rolled out" in installed.stdout, installed
        example = (REPO / "manifests" / "examples" / "refused-worker.yaml").read_text()
        local = example.replace("image: busybox:1.36", f"image: {images.BUSYBOX_REF}")
        assert local != example
        (tmp_path / "example.yaml").write_text(local)
        run(control_plane, "kubectl", "apply", "-n", workers, "-f", str(tmp_path / "example.yaml"))
        until_done(control_plane, workers)

        [removed] = json.loads(read(reading, plane=control_plane, namespace=namespace, home=tmp_path))
        assert removed["name"] == "swarm-worker-example-1-1" and removed["outcome"] == "deleted"
        startup = removed["startup"]
        assert startup["phase"] == "Failed" and startup["class"] == "exit_code"
        [container] = startup["containers"]
        assert container["name"] == "worker" and container["terminated"]["exitCode"] == 78
        assert "worker startup refused: planted kind refusal" in container["log"]
    finally:
        run(
            control_plane,
            "kubectl",
            "delete",
            "-n",
            workers,
            "-f",
            str(REPO / "manifests/examples/refused-worker.yaml"),
            "--wait=false",
            check=False,
        )
        run(
            control_plane,
            "helm",
            "uninstall",
            "agentihooks-swarm",
            "--namespace",
            namespace,
            "--wait",
            check=False,
        )
        run(control_plane, "kubectl", "delete", "namespace", workers, "--wait=false", check=False)
