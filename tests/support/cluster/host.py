"""What a real node changes on this machine, recorded before and put back after.

A real kubelet, containerd, kube-proxy and the CNI plugin change the host: an address on ``lo``
(:data:`NODE_IP`), sysctls (``ip_forward``, the kubelet's ``vm.overcommit_memory``, ``kernel.panic``
…), nftables rules (kube-proxy's tables, the kubelet's ``KUBE-*`` iptables-nft chains), cgroups
under :data:`CGROUP_ROOT`, mounts (container root filesystems, Pod volumes, network namespaces),
and a few well-known directories. :func:`claim` records the machine's state in
:data:`CLAIM_FILE` before any of that happens and makes the changes the node needs;
:func:`release` puts everything back. A claim left by a run that was killed is released by the
next :func:`claim` or :func:`baseline` (or ``python -m tests.tools.cluster down``), so a killed run
leaves nothing behind for longer than until the next start.

Only one real node runs on a machine at a time: it owns :data:`NODE_IP` and these host settings.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Final

from tests.support.cluster.processes import ClusterError, cmdline, kill_pids, pid_alive, pids_mentioning

#: The node's address: a /32 on ``lo`` (a kubelet refuses a loopback node IP, and Pods must reach
#: the API server and the kubelet at an address that is not loopback inside their namespace).
NODE_IP: Final = "10.254.254.1"
#: The kubelet's ``cgroupRoot``: every Pod cgroup lives below it in each cgroup v1 hierarchy.
CGROUP_ROOT: Final = "agentihooks-swarm-node"
CLAIM_FILE: Final = Path("/run/agentihooks-swarm-real-node.json")
#: Host paths a kubelet or containerd may create whatever their configured roots (the kubelet's
#: device-plugin socket directory is fixed, for example); removed again when they did not exist.
CREATED_PATHS: Final = (
    "/var/lib/kubelet",
    "/run/containerd",
    "/opt/containerd",
    "/run/netns",
    "/var/run/netns",
    "/etc/cni",
    "/var/lib/cni",
)
#: Sysctls the node's programs set (the kubelet, kube-proxy, the CNI plugin, us).
SYSCTLS: Final = (
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/forwarding",
    "net/ipv4/conf/default/forwarding",
    "net/ipv4/conf/all/route_localnet",
    "net/ipv6/conf/all/forwarding",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
_CGROUP_FS: Final = Path("/sys/fs/cgroup")


def runtime_dir(workdir: Path) -> Path:
    """A short directory for the node's unix sockets (a socket path has at most 104 bytes, and a
    pytest work directory is longer): ``/run/agentihooks-swarm-<hash of workdir>``."""
    digest = hashlib.sha256(str(workdir).encode()).hexdigest()[:10]
    return Path("/run") / f"agentihooks-swarm-{digest}"


def _ours(workdir: Path) -> list[int]:
    """Live processes started from ``workdir``'s node (containerd shims name only its socket)."""
    return sorted(set(pids_mentioning(str(workdir))) | set(pids_mentioning(str(runtime_dir(workdir)))))


def _run(*argv: str, check: bool = True, stdin: str | None = None) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, input=stdin, check=False)
    if check and done.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _read_sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name).read_text().strip()
    except OSError:
        return None


def _write_sysctl(name: str, value: str) -> None:
    with contextlib.suppress(OSError):
        (Path("/proc/sys") / name).write_text(value + "\n")


def _lo_has(address: str) -> bool:
    return f" {address}/" in _run("ip", "-o", "-4", "addr", "show", "dev", "lo")


def _cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (the kubelet checks its cgroup root in each, named ones too)."""
    if not _CGROUP_FS.is_dir():
        return []
    return [p for p in sorted(_CGROUP_FS.iterdir()) if p.is_dir() and not p.is_symlink()]


def snapshot() -> dict[str, Any]:
    """The machine's state that a real node changes, as :func:`release` will restore it."""
    return {
        "sysctls": {name: _read_sysctl(name) for name in SYSCTLS},
        "lo_had_address": _lo_has(NODE_IP),
        "existing_paths": [p for p in CREATED_PATHS if os.path.lexists(p)],
        "nft_ruleset": _run("nft", "list", "ruleset", check=False),
    }


def baseline(*, starting: Path | None = None) -> dict[str, Any]:
    """The machine's :func:`snapshot` as it is without any real node: a claim left by a run that
    was killed is released first. A check that a node put the machine back compares with this, not
    with a killed run's leftovers, which the node's own start would release. Refuses (ClusterError)
    while a real node other than ``starting``'s runs."""
    if CLAIM_FILE.exists():
        previous = json.loads(CLAIM_FILE.read_text())
        other = Path(previous["workdir"])
        owner = int(previous.get("owner", 0))
        running = other != starting and _kubelet_runs(other) and (owner == 0 or pid_alive(owner))
        if running:
            raise ClusterError(
                f"a real node is already running from {other} (owner pid {owner or 'none: detached'}); "
                "stop it (python -m tests.tools.cluster down) before starting another"
            )
        release(workdir=other)
    return snapshot()


def claim(*, workdir: Path) -> None:
    """Make this machine ready for a real node whose state lives in ``workdir``.

    Releases a claim left by a killed run; refuses (ClusterError) when another real node is
    running. Records the machine's state in :data:`CLAIM_FILE`, then adds :data:`NODE_IP` to ``lo``,
    turns on IPv4 forwarding (Pod to Service to Pod traffic is routed through the host) and
    creates the kubelet's cgroup root.
    """
    state = baseline(starting=workdir)
    state.update(workdir=str(workdir), owner=os.getpid())
    CLAIM_FILE.write_text(json.dumps(state, indent=2) + "\n")
    if not state["lo_had_address"]:
        _run("ip", "addr", "add", f"{NODE_IP}/32", "dev", "lo")
    _write_sysctl("net/ipv4/ip_forward", "1")
    for hierarchy in _cgroup_hierarchies():
        (hierarchy / CGROUP_ROOT).mkdir(exist_ok=True)


def _kubelet_runs(workdir: Path) -> bool:
    argvs = (cmdline(pid) for pid in pids_mentioning(str(workdir)))
    return any(Path(argv[0]).name == "kubelet" for argv in argvs if argv)


def adopt(*, workdir: Path, owner: int) -> None:
    """Record ``owner`` (a detached CLI cluster: 0, no owning process) as the claim's owner."""
    if CLAIM_FILE.exists():
        state = json.loads(CLAIM_FILE.read_text())
        if Path(state["workdir"]) == workdir:
            state["owner"] = owner
            CLAIM_FILE.write_text(json.dumps(state, indent=2) + "\n")


def release(*, workdir: Path) -> None:
    """Put back everything the real node in ``workdir`` changed (idempotent).

    Kills what still runs from ``workdir`` (containerd shims outlive containerd), unmounts what
    is mounted below it, removes the kubelet's cgroups, restores the nftables ruleset, the
    sysctls, ``lo`` and the well-known paths as :func:`claim` recorded them.
    """
    state: dict[str, Any] | None = None
    if CLAIM_FILE.exists():
        recorded = json.loads(CLAIM_FILE.read_text())
        if Path(recorded["workdir"]) == workdir:
            state = recorded
    kill_pids(_ours(workdir))
    _kill_containers()
    unmount_below(workdir)
    unmount_below(runtime_dir(workdir))
    shutil.rmtree(runtime_dir(workdir), ignore_errors=True)
    for path in CREATED_PATHS:
        if state is not None and path not in state["existing_paths"] and os.path.lexists(path):
            unmount_below(Path(path))
            shutil.rmtree(path, ignore_errors=True)
    _remove_cgroups()
    if state is None:
        return
    _restore_nftables(state["nft_ruleset"])
    for name, value in state["sysctls"].items():
        if value is not None and _read_sysctl(name) != value:
            _write_sysctl(name, value)
    if not state["lo_had_address"] and _lo_has(NODE_IP):
        _run("ip", "addr", "del", f"{NODE_IP}/32", "dev", "lo", check=False)
    CLAIM_FILE.unlink(missing_ok=True)


def unmount_below(root: Path) -> None:
    """Lazily unmount every mount point at or below ``root``, deepest first."""
    prefix = str(root.resolve()) if root.exists() else str(root)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    for point in sorted(set(points), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _cgroup_members() -> list[int]:
    """Every process in a cgroup below the node's cgroup root (containers, whatever their argv)."""
    found: set[int] = set()
    for hierarchy in _cgroup_hierarchies():
        root = hierarchy / CGROUP_ROOT
        for procs in root.rglob("cgroup.procs") if root.is_dir() else ():
            with contextlib.suppress(OSError):
                found.update(int(line) for line in procs.read_text().split() if line.isdigit())
    return sorted(found)


def _kill_containers() -> None:
    """A container's processes name nothing of ours in their argv and outlive their shim: find
    them by their cgroup, below the node's root (which only the claiming node uses), and kill them."""
    for _ in range(3):
        members = _cgroup_members()
        if not members:
            return
        kill_pids(members)


def _remove_cgroups(*, timeout: float = 10.0) -> None:
    """rmdir the node's cgroups bottom-up; a cgroup whose last process is still exiting is busy
    for a moment, so retry until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        busy = False
        for hierarchy in _cgroup_hierarchies():
            root = hierarchy / CGROUP_ROOT
            if not root.is_dir():
                continue
            below = [p for p in root.rglob("*") if p.is_dir()]
            for directory in [*sorted(below, key=lambda p: len(p.parts), reverse=True), root]:
                try:
                    directory.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    busy = True
        if not busy or time.monotonic() > deadline:
            return
        _kill_containers()
        time.sleep(0.1)


def _restore_nftables(saved: str) -> None:
    """Make the nftables ruleset what it was: kube-proxy's tables and the kubelet's chains go."""
    if _run("nft", "list", "ruleset", check=False) == saved:
        return
    _run("nft", "flush", "ruleset", check=False)
    # `flush ruleset` empties and deletes every table; load the saved one back if there was one.
    if saved.strip():
        _run("nft", "-f", "-", stdin=saved, check=False)


def leftovers(*, workdir: Path) -> list[str]:
    """What of a released real node is still on the machine (empty when nothing is)."""
    found: list[str] = []
    if CLAIM_FILE.exists() and claimed_workdir() == workdir:
        found.append(f"claim file {CLAIM_FILE}")
    running = _ours(workdir)
    if running:
        found.append(f"processes of the node in {workdir}: {running}")
    if runtime_dir(workdir).exists():
        found.append(f"directory {runtime_dir(workdir)}")
    prefix = str(workdir)
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    found += [f"mount {m}" for m in mounts if m.startswith(prefix)]
    held_by_another = CLAIM_FILE.exists() and claimed_workdir() != workdir
    if not held_by_another:  # the cgroup root is the machine's one real node's, whichever it is
        found += [f"cgroup {h / CGROUP_ROOT}" for h in _cgroup_hierarchies() if (h / CGROUP_ROOT).exists()]
    return found


def claimed_workdir() -> Path:
    """The work directory of the real node that holds :data:`CLAIM_FILE`."""
    return Path(json.loads(CLAIM_FILE.read_text())["workdir"])
