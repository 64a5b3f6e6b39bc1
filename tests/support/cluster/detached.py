"""A detached cluster: one started by ``python -m tests.tools.cluster up`` (``make cluster-up``)
outlives that command, and is found again by its state file, by the CLI's other commands and by
the tests' fixtures, the demo and the benchmarks when :data:`STATE_ENV` names it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from tests.support.cluster import nodes
from tests.support.cluster.control_plane import ControlPlane
from tests.support.cluster.processes import ClusterError

STATE_FILE: Final = "state.json"
#: Set to a state file written by ``up`` to make the pytest fixtures reuse that running cluster.
STATE_ENV: Final = "AGENTIHOOKS_SWARM_CLUSTER_STATE"


def state_dir() -> Path:
    """``${TMPDIR:-/tmp}/agentihooks-swarm-cluster``: where the CLI keeps a detached cluster."""
    return Path(os.environ.get("TMPDIR") or "/tmp") / "agentihooks-swarm-cluster"


def load_state() -> ControlPlane | None:
    """The cluster the CLI keeps in :func:`state_dir`, or None when none was started."""
    path = state_dir() / STATE_FILE
    if not path.exists():
        return None
    return ControlPlane.load(path)


def named_cluster(*, kind: nodes.NodeKind | None = None) -> ControlPlane | None:
    """The running cluster :data:`STATE_ENV` names (``eval "$(… cluster env)"`` sets it), or None
    when it is unset or names a cluster of another ``kind``.

    A variable left from a cluster since stopped, or a cluster that does not answer, is a
    :class:`ClusterError` that names the variable and says what to do.
    """
    state = os.environ.get(STATE_ENV)
    if not state:
        return None
    again = 'make cluster-up && eval "$(.venv/bin/python -m tests.tools.cluster env)"'
    try:
        plane = ControlPlane.load(Path(state))
    except FileNotFoundError:
        raise ClusterError(
            f"{STATE_ENV}={state}, but that file is gone: the cluster it named was stopped (make"
            f" cluster-down) after it was set. Run 'unset {STATE_ENV}' and the tests start a cluster"
            f" of their own, or start one and point at it again: {again}"
        ) from None
    except (OSError, ValueError, KeyError) as error:
        raise ClusterError(
            f"{STATE_ENV}={state}: not a cluster state file ({error!r}). Run 'unset {STATE_ENV}',"
            f" or start a cluster and point at it again: {again}"
        ) from error
    if kind is not None and plane.node_kind != kind:
        return None
    if not plane.healthy():
        raise ClusterError(
            f"{STATE_ENV}={state} names a cluster that does not answer ('make cluster-status' shows"
            f" what is down). Run 'unset {STATE_ENV}' and the tests start a cluster of their own, or"
            f" start it again: make cluster-down && {again}"
        )
    return plane
