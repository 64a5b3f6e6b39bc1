"""The one place that decides which node a cluster gets, and gathers what that node needs.

``kwok`` (the default) plays Pods from annotations: fast, for the integration tests, the fault
matrix and the benchmarks. ``real`` runs real containers with containerd and a kubelet, from
images built offline here (:mod:`tests.support.images`): for what users run — the operator's
image, the chart's controller in-cluster, a worker's container.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

from tests.support.cluster import control_plane, real_node
from tests.support.cluster.control_plane import ControlPlane, NodeKind
from tests.support.cluster.processes import ClusterError

__all__ = ["NodeKind", "real_node_images", "start"]


def real_node_images(*, out: TextIO | None = sys.stderr) -> real_node.Images:
    """Build (once; cached) and return the images a real node is loaded with."""
    from tests.support import images

    return real_node.Images(archives=images.all_images(out=out), sandbox=images.PAUSE_REF)


def start(
    *,
    kind: NodeKind,
    workdir: Path,
    detached: bool = False,
    bin_dir: Path | None = None,
    out: TextIO | None = None,
) -> ControlPlane:
    """Build what is missing (binaries, images, Debian packages) and start a cluster of ``kind``;
    with ``out``, one line per stage of each goes there."""
    bin_dir = bin_dir or control_plane.build(only=kind)
    if kind == "kwok":
        return control_plane.start(workdir=workdir, bin_dir=bin_dir, detached=detached, out=out)
    if os.geteuid() != 0:
        raise ClusterError(
            "the real node runs containerd and a kubelet and changes this machine's network settings,"
            " so it needs root: run it as root (e.g. 'sudo make cluster-up NODE=real'), or use the kwok"
            " node (NODE=kwok, the default)"
        )
    real_node.ensure_packages(out=out)
    return control_plane.start(
        workdir=workdir,
        bin_dir=bin_dir,
        detached=detached,
        node="real",
        images=real_node_images(out=out),
        out=out,
    )
