"""The cluster's child processes: starting them in their own process groups, waiting on them,
and killing them, with errors that show each child's last log lines.

Every child leads its own process group (``start_new_session``), so killing the group ends
whatever it forked; a child started from the main thread of a process that does not detach it
gets ``PR_SET_PDEATHSIG`` and dies with that process even when it is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final, TypeVar

POLL_INTERVAL: Final = 0.05
_T = TypeVar("_T")


class ClusterError(RuntimeError):
    """The control plane or its node could not be built, started or reached."""


@dataclass
class Child:
    """One cluster process; it leads its own process group (pgid == pid)."""

    name: str
    pid: int
    log: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    argv: tuple[str, ...] = field(default=(), repr=False, compare=False)
    """How it was started (empty for a child loaded from a state file): :func:`respawn` reuses it."""
    env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    """The variables it got on top of ours."""

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return pid_alive(self.pid)

    def exit_code(self) -> int | None:
        return self.popen.poll() if self.popen is not None else None


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # Field 3 (after the parenthesised command) is the state; Z is a zombie.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def cmdline(pid: int) -> list[str]:
    """``pid``'s argv ([] when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def pid_runs_from(pid: int, bin_dir: Path) -> bool:
    """Whether ``pid`` still runs one of our binaries (guards against pid reuse)."""
    argv = cmdline(pid)
    return bool(argv) and Path(argv[0]).parent == bin_dir


def pids_mentioning(needle: str) -> list[int]:
    """Every live process whose command line contains ``needle`` (e.g. a state directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        if any(needle in part for part in cmdline(int(entry.name))) and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _tie_to_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the thread that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def kill_groups(
    children: Sequence[Child], *, sig: signal.Signals = signal.SIGKILL, grace: float = 10
) -> None:
    """Send ``sig`` to each child's process group and wait (up to ``grace`` s) until it is gone.

    The default is SIGKILL, no graceful shutdown: the state is thrown away, and kube-apiserver and
    the embedded etcd each take seconds to shut down gracefully.
    """
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)
    for child in children:
        if child.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=grace)
        else:
            deadline = time.monotonic() + grace
            while pid_alive(child.pid) and time.monotonic() < deadline:
                time.sleep(POLL_INTERVAL)


def kill_pids(pids: Sequence[int], *, grace: float = 10) -> None:
    """SIGKILL processes that are not our children (e.g. containerd shims) and wait for them."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL)


def tail(path: Path, *, lines: int = 30) -> str:
    try:
        text = path.read_bytes()[-16384:].decode(errors="replace")
    except OSError as error:
        return f"(no log: {error})"
    return "\n".join(text.splitlines()[-lines:])


def free_ports(count: int, *, host: str = "127.0.0.1") -> list[int]:
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _popen(
    name: str, argv: Sequence[str], *, stdout: IO[bytes], cwd: Path, env: Mapping[str, str], tied: bool
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session; a program that is not there is a :class:`ClusterError`
    that says where it comes from."""
    try:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            preexec_fn=_tie_to_parent if tied else None,
        )
    except FileNotFoundError:
        raise ClusterError(
            f"{name}: {argv[0]} is not there. The cluster's own binaries come from 'make binaries'"
            " (tests/tools/binaries/build.sh); containerd and the real node's other programs from"
            " 'make system-deps' (as root)"
        ) from None


class Starter:
    """Starts processes into ``children`` (logs under ``workdir/log``) and waits on conditions,
    turning a dead child or a deadline into a :class:`ClusterError` with every child's log tail."""

    def __init__(self, *, workdir: Path, children: list[Child], detached: bool, deadline: float) -> None:
        self.workdir = workdir
        self.children = children
        self.detached = detached
        self.deadline = deadline
        (workdir / "log").mkdir(parents=True, exist_ok=True)

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        tie: bool = True,
    ) -> Child:
        """Start ``argv``; ``tie=False`` lets it outlive us (containerd, whose shims must be
        stopped through it, is stopped explicitly instead)."""
        log = self.workdir / "log" / f"{name}.log"
        tied = tie and not self.detached and threading.current_thread() is threading.main_thread()
        with log.open("ab") as out:
            out.write(f"$ {shlex.join(argv)}\n".encode())
            out.flush()
            popen = _popen(
                name,
                argv,
                stdout=out,
                cwd=self.workdir,
                env={**os.environ, **(env or {})},
                tied=tied,
            )
        child = Child(name=name, pid=popen.pid, log=log, popen=popen, argv=tuple(argv), env=dict(env or {}))
        self.children.append(child)
        return child

    def respawn(self, child: Child, *, group: bool = True) -> Child:
        """SIGKILL ``child`` and start it again with the same argv and environment: a crash and a
        restart, on the same ports and the same data. ``group=False`` kills only its process, not
        its group (containerd, whose shims must outlive it as they outlive a real restart)."""
        if not child.argv:
            raise ClusterError(f"{child.name} was not started here; its command line is unknown")
        if group:
            kill_groups([child])
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            if child.popen is not None:
                child.popen.wait(timeout=10)
        self.children.remove(child)
        return self.spawn(child.name, child.argv, env=child.env)

    def fail(self, message: str) -> ClusterError:
        parts = [message]
        for child in self.children:
            code = child.exit_code()
            state = "running" if code is None else f"exited with {code}"
            parts.append(f"--- {child.name} ({state}), last lines of {child.log}:\n{tail(child.log)}")
        return ClusterError("\n".join(parts))

    def wait(self, what: str, check: Callable[[], _T | None]) -> _T:
        last_error: BaseException | None = None
        while True:
            dead = [c for c in self.children if not c.alive()]
            if dead:
                raise self.fail(f"{dead[0].name} exited while waiting for {what}")
            try:
                result = check()
            except (OSError, http.client.HTTPException, ClusterError, subprocess.SubprocessError) as error:
                result, last_error = None, error
            if result is not None:
                return result
            if time.monotonic() > self.deadline:
                raise self.fail(f"timed out waiting for {what} (last error: {last_error!r})")
            time.sleep(POLL_INTERVAL)
