"""``python -m tests.tools.cluster up|down|status|env [--node kwok|real]``: a detached cluster
for a person (``make cluster-up``, ``make demo``), with its state in
:func:`~tests.support.cluster.detached.state_dir`."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence

from tests.support.cluster import host, nodes
from tests.support.cluster.control_plane import ControlPlane
from tests.support.cluster.detached import STATE_ENV, STATE_FILE, load_state, state_dir
from tests.support.cluster.processes import ClusterError


def _env_lines(plane: ControlPlane) -> list[str]:
    return [
        f"export KUBECONFIG={shlex.quote(str(plane.kubeconfig))}",
        f'export PATH={shlex.quote(str(plane.bin_dir))}:"$PATH"',
        f"export {STATE_ENV}={shlex.quote(str(plane.workdir / STATE_FILE))}",
    ]


def _cli_up(node: nodes.NodeKind) -> int:
    existing = load_state()
    if existing is not None:
        if existing.healthy() and existing.node_kind == node:
            print(existing.kubeconfig)
            print(_env_lines(existing)[0])
            return 0
        print("cluster: removing a stale or different cluster", file=sys.stderr)
        existing.stop()
    shutil.rmtree(state_dir(), ignore_errors=True)
    began = time.monotonic()
    plane = nodes.start(kind=node, workdir=state_dir(), detached=True, out=sys.stderr)
    if node == "real":
        host.adopt(workdir=plane.workdir, owner=0)  # no owning process: `down` releases it
    plane.save(state_dir() / STATE_FILE)
    print(f"cluster: up in {time.monotonic() - began:.1f}s, logs in {plane.workdir / 'log'}", file=sys.stderr)
    print(plane.kubeconfig)
    print(_env_lines(plane)[0])
    return 0


def _cli_down(node: nodes.NodeKind) -> int:
    del node  # whatever kind is up
    existing = load_state()
    if existing is not None:
        existing.stop()
        leftovers = [c for c in existing.children if existing._owns(c)]
        if existing.node_kind == "real":
            leftovers_on_host = host.leftovers(workdir=existing.workdir)
            if leftovers_on_host:
                print(f"cluster: left on the machine: {leftovers_on_host}", file=sys.stderr)
                return 1
        if leftovers:
            print(f"cluster: could not stop {[c.name for c in leftovers]}", file=sys.stderr)
            return 1
    elif host.CLAIM_FILE.exists():
        print(f"cluster: releasing a real node left by a killed run ({host.CLAIM_FILE})", file=sys.stderr)
        host.release(workdir=host.claimed_workdir())
    shutil.rmtree(state_dir(), ignore_errors=True)
    print("cluster: down", file=sys.stderr)
    return 0


def _cli_status(node: nodes.NodeKind) -> int:
    del node
    existing = load_state()
    if existing is None:
        print("cluster: not up")
        return 1
    print(f"{'node':<24} {existing.node_name} ({existing.node_kind})")
    for child in existing.children:
        print(f"{child.name:<24} pid {child.pid:<8} {'running' if child.alive() else 'NOT RUNNING'}")
    healthy = existing.healthy()
    print(f"{'kube-apiserver /readyz':<24} {'ok' if healthy else 'NOT OK'}  {existing.server}")
    print(f"{'kubeconfig':<24} {existing.kubeconfig}")
    return 0 if healthy else 1


def _cli_env(node: nodes.NodeKind) -> int:
    del node
    existing = load_state()
    if existing is None:
        print("cluster: not up (run: python -m tests.tools.cluster up)", file=sys.stderr)
        return 1
    print("\n".join(_env_lines(existing)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.tools.cluster", description="The local test cluster, detached."
    )
    parser.add_argument("command", choices=["up", "down", "status", "env"])
    parser.add_argument(
        "--node",
        choices=["kwok", "real"],
        default=os.environ.get("NODE") or "kwok",
        help="kwok plays Pods (fast); real runs containers with containerd and a kubelet (root)",
    )
    arguments = parser.parse_args(argv)
    commands: dict[str, Callable[[nodes.NodeKind], int]] = {
        "up": _cli_up,
        "down": _cli_down,
        "status": _cli_status,
        "env": _cli_env,
    }
    try:
        return commands[arguments.command](arguments.node)
    except ClusterError as error:
        print(f"cluster: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
