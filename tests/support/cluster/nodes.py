"""The one place that decides which node a cluster gets, and gathers what that node needs.

``kwok`` (the default) plays Pods from annotations: fast, for the integration tests, the fault
matrix and the benchmarks. ``real`` runs real containers with containerd and a kubelet, from
images built offline here (:mod:`tests.support.images`): for what users run — the operator's
image, the chart's controller in-cluster, a worker's container.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.cluster import control_plane, real_node
from tests.support.cluster.control_plane import ControlPlane, NodeKind

__all__ = ["NodeKind", "real_node_images", "start"]


def real_node_images() -> real_node.Images:
    """Build (once; cached) and return the images a real node is loaded with."""
    from tests.support import images

    return real_node.Images(archives=images.all_images(), sandbox=images.PAUSE_REF)


def start(
    *, kind: NodeKind, workdir: Path, detached: bool = False, bin_dir: Path | None = None
) -> ControlPlane:
    """Build what is missing (binaries, images, Debian packages) and start a cluster of ``kind``."""
    bin_dir = bin_dir or control_plane.build()
    if kind == "kwok":
        return control_plane.start(workdir=workdir, bin_dir=bin_dir, detached=detached)
    real_node.ensure_packages()
    return control_plane.start(
        workdir=workdir, bin_dir=bin_dir, detached=detached, node="real", images=real_node_images()
    )
