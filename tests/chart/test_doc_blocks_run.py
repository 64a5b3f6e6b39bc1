"""Docs that run: every shell block a user page marks ``<!-- docs: runs -->`` is run here, on the
local control plane, with the substitutions of ``tests/support/doc_blocks.py`` (the test's own
namespace for the page's), and what it prints is checked against what the page says it prints.

The chart is installed once, by the page's own ``helm install`` block; the example of Getting
started is applied, then the other blocks run against that release.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import doc_blocks
from tests.support.cluster import ControlPlane
from tests.support.doc_blocks import REPO, Block, runnable, substituted, substitutions, user_pages

pytestmark = pytest.mark.integration

#: What each run block prints (stdout and stderr), by a piece of its text: a block marked to run
#: that has no entry here fails, so a new ``runs`` mark comes with what its page promises.
EXPECTED: dict[str, str] = {
    "helm install agentihooks-swarm": 'deployment "agentihooks-swarm-controller" successfully rolled out',
    "kubectl describe execution": "Name:         example-1",
    "kubectl get pods -n swarm-workers": "No resources found",
    "--subresource=log": "yes",
}


def run_block(block: Block, *, plane: ControlPlane, namespace: str, home: Path) -> str:
    replacements = substitutions(namespace=namespace)
    done = doc_blocks.run(
        block,
        kubeconfig=plane.kubeconfig,
        bin_dir=plane.bin_dir,
        image="ghcr.io/agentihooks/agentihooks-swarm:0.1.0",  # the pages' own; nothing is pulled
        replacements=replacements,
        home=home,
        timeout=240,
    )
    said = done.stdout + done.stderr
    script = substituted(block.text, replacements)
    assert done.returncode == 0, f"{block.where()} failed ({done.returncode}):\n{script}\n{said}"
    return said


@pytest.mark.pod_security("restricted")
def test_the_blocks_marked_to_run_run_and_print_what_their_pages_say(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    blocks = runnable(user_pages())
    assert any("helm install" in block.text for block in blocks), "the install block is marked to run"
    kubectl = [str(control_plane.bin_dir / "kubectl"), "--kubeconfig", str(control_plane.kubeconfig)]
    try:
        for block in sorted(blocks, key=lambda block: "helm install" not in block.text):
            if "kubectl describe execution" in block.text:
                example = REPO / "manifests" / "examples" / "refused-worker.yaml"
                applied = [*kubectl, "apply", "-n", f"{namespace}-workers", "-f", str(example)]
                subprocess.run(applied, check=True, capture_output=True, timeout=60)
            said = run_block(block, plane=control_plane, namespace=namespace, home=tmp_path)
            expected = [text for key, text in EXPECTED.items() if key in block.text]
            assert expected, f"{block.where()} is marked to run but EXPECTED says nothing of it"
            for text in expected:
                assert text in said, f"{block.where()}: {text!r} not in:\n{said}"
    finally:
        helm = [str(control_plane.bin_dir / "helm"), "--kubeconfig", str(control_plane.kubeconfig)]
        home = {f"HELM_{part}_HOME": str(tmp_path / part.lower()) for part in ("CACHE", "CONFIG", "DATA")}
        uninstall = [*helm, "uninstall", "agentihooks-swarm", "-n", namespace, "--wait=hookOnly"]
        subprocess.run(uninstall, env={**os.environ, **home}, check=False, timeout=120)
        control_plane.request("DELETE", f"/api/v1/namespaces/{namespace}-workers")


def test_a_run_block_broken_in_a_copy_fails_naming_the_block(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    copy = tmp_path / "getting-started.md"
    text = (REPO / "docs" / "getting-started.md").read_text()
    copy.write_text(
        text.replace(
            "kubectl describe execution -n swarm-workers example-1",
            "kubectl describe executionz -n swarm-workers example-1",
        )
    )
    [broken] = [block for block in runnable([copy]) if "executionz" in block.text]
    with pytest.raises(AssertionError, match=f"{broken.where()} failed") as failed:
        run_block(broken, plane=control_plane, namespace=namespace, home=tmp_path)
    assert "executionz" in str(failed.value)
