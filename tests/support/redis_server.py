"""A real ``redis-server`` process for tests.

The binary comes from Debian's ``redis-server`` package. When it is missing,
:func:`ensure_redis_server_binary` installs it with ``apt-get`` (the test
machines run as root) and raises :class:`RedisServerError` with the installer's
output when that is not possible.

:class:`RedisServer` runs one server on ``127.0.0.1`` with its own temporary
directory and no persistence (``extra_args=AOF`` gives it the chart's: a restart
keeps every acknowledged write). It can be stopped and started again on the SAME
port (to simulate an outage), frozen with SIGSTOP (to simulate a server that
accepts connections but never answers) and is always killed when the Python
process exits (atexit handler + its own process group).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from tests.support import progress
from tests.support.started import Started

__all__ = [
    "AOF",
    "RedisServer",
    "RedisServerError",
    "ensure_redis_server_binary",
    "free_port",
]

_APT_TIMEOUT_SECONDS = 600.0
#: ``extra_args`` for the persistence the chart's bundled Redis has (AOF, fsync on every write): a
#: server stopped and started again (:meth:`RedisServer.restart`, same port and directory) comes
#: back with its data, and with a new replication id, as a restarted Redis Pod does.
AOF: tuple[str, ...] = ("--appendonly", "yes", "--appendfsync", "always")
_install_lock = threading.Lock()
_live_servers: weakref.WeakSet[RedisServer] = weakref.WeakSet()


class RedisServerError(RuntimeError):
    """redis-server could not be installed, started or stopped."""


def free_port(*, host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def ensure_redis_server_binary() -> str:
    """Return the path of ``redis-server``, installing Debian's package when it is absent."""
    found = shutil.which("redis-server")
    if found is not None:
        return found
    with _install_lock:
        found = shutil.which("redis-server")
        if found is not None:
            return found
        if shutil.which("apt-get") is None:
            raise RedisServerError(
                "redis-server is not installed and apt-get is not available: install Redis"
                " (redis-server and redis-cli on PATH), then run this again"
            )
        if os.geteuid() != 0:
            raise RedisServerError(
                "redis-server is not installed, and installing it needs root: run"
                " 'sudo apt-get install redis-server' (or 'make system-deps-kwok' as root)"
            )
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        steps = progress.Progress(log=progress.log_path("redis-server.log"), total=2)
        steps.say(f"redis-server is not installed: installing Debian's package; details in {steps.log}")
        try:
            with steps.stage("apt-get update"):
                steps.run(["apt-get", "update"], env=env, timeout=_APT_TIMEOUT_SECONDS)
            with steps.stage("apt-get install redis-server"):
                steps.run(
                    ["apt-get", "install", "-y", "--no-install-recommends", "redis-server"],
                    env=env,
                    timeout=_APT_TIMEOUT_SECONDS,
                )
        except progress.StageFailed as error:
            raise RedisServerError(f"installing redis-server failed: {error}") from error
        found = shutil.which("redis-server")
        if found is None:
            raise RedisServerError("apt-get installed 'redis-server' but the binary is not on PATH")
        return found


def _kill_all_at_exit() -> None:
    for server in list(_live_servers):
        with contextlib.suppress(Exception):
            server.stop()


atexit.register(_kill_all_at_exit)


class RedisServer(Started):
    """One real redis-server on 127.0.0.1.

    The port is chosen when the object is made (or given) and stays the same
    across :meth:`stop` / :meth:`start`, so clients holding :attr:`url` can
    reconnect after a simulated outage.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        password: str | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 15.0,
        extra_args: tuple[str, ...] = (),
        config_file: Path | None = None,
    ) -> None:
        self._host = host
        self._port_fixed = port is not None
        self._port = port if port is not None else free_port(host=host)
        self._password = password
        self._startup_timeout = startup_timeout
        self._extra_args = extra_args
        self._config_file = config_file
        self._binary: str | None = None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._frozen = False
        self._thaw_timer: threading.Timer | None = None
        self._lock = threading.RLock()

    # -- properties -----------------------------------------------------

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def password(self) -> str | None:
        return self._password

    @property
    def url(self) -> str:
        """``redis://[:password@]127.0.0.1:PORT/0``."""
        auth = f":{quote(self._password, safe='')}@" if self._password is not None else ""
        return f"redis://{auth}{self._host}:{self._port}/0"

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    @property
    def frozen(self) -> bool:
        return self._frozen

    @property
    def directory(self) -> Path:
        if self._tmpdir is None:
            raise RedisServerError("redis-server has not been started yet")
        return Path(self._tmpdir.name)

    @property
    def log_file(self) -> Path:
        return self.directory / "redis.log"

    # -- lifecycle ------------------------------------------------------

    def start(self) -> None:
        """Start redis-server (again) and wait until it answers PING."""
        with self._lock:
            if self.running:
                return
            if self._binary is None:
                self._binary = ensure_redis_server_binary()
            if self._tmpdir is None:
                self._tmpdir = tempfile.TemporaryDirectory(prefix="redis-test-")
            attempts = 1 if self._port_fixed else 3
            last_error: RedisServerError | None = None
            for _ in range(attempts):
                try:
                    self._spawn_and_wait()
                except RedisServerError as exc:
                    last_error = exc
                    if self._port_fixed:
                        break
                    self._port = free_port(host=self._host)
                else:
                    # Once started, the port is part of the URL tests hold: keep it.
                    self._port_fixed = True
                    _live_servers.add(self)
                    return
            assert last_error is not None
            raise last_error

    def _command(self) -> list[str]:
        assert self._binary is not None
        command = [
            self._binary,
            # A config file, when given, first: the options below override it. CONFIG REWRITE
            # (Sentinel's, after it changes whom a server replicates) writes to it, so a server
            # started again comes back in the role Sentinel gave it, as a deployed one does.
            *([str(self._config_file)] if self._config_file is not None else []),
            "--bind", self._host,
            "--port", str(self._port),
            "--dir", str(self.directory),
            "--logfile", str(self.log_file),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--databases", "16",
        ]  # fmt: skip
        if self._password is not None:
            command += ["--requirepass", self._password]
        command += list(self._extra_args)
        return command

    def _spawn_and_wait(self) -> None:
        process = subprocess.Popen(
            self._command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # own process group: killpg reaches it and only it
        )
        self._process = process
        self._frozen = False
        deadline = time.monotonic() + self._startup_timeout
        while True:
            if process.poll() is not None:
                self._process = None
                tail = self._log_tail()
                taken = (
                    f"\nport {self._port} is taken by another process ('ss -ltnp sport = :{self._port}'"
                    " shows which): stop it, or give RedisServer another port (or none, to have one chosen)"
                    if "Address already in use" in tail
                    else ""
                )
                raise RedisServerError(
                    f"redis-server exited with {process.returncode} while starting on port "
                    f"{self._port}:\n{tail}{taken}"
                )
            if self._ping_once(timeout=0.5):
                return
            if time.monotonic() > deadline:
                self._kill(process)
                self._process = None
                raise RedisServerError(
                    f"redis-server did not answer PING on port {self._port} within "
                    f"{self._startup_timeout}s:\n{self._log_tail()}"
                )
            time.sleep(0.02)

    def stop(self, *, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL). The port is kept for :meth:`start`."""
        with self._lock:
            process = self._taken()
            if process is None:
                return
            if process.poll() is None:
                if self._frozen:
                    self._signal_group(process, signal.SIGCONT)
                self._signal_group(process, signal.SIGTERM)
                try:
                    process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self._kill(process)
            self._signal_group(process, signal.SIGKILL)  # anything left in the group
            self._ended(timeout=timeout)

    def kill(self, *, timeout: float = 10.0) -> None:
        """SIGKILL the server: a crash, no shutdown and no last write. :meth:`start` brings it back."""
        with self._lock:
            process = self._taken()
            if process is None:
                return
            self._kill(process)
            self._ended(timeout=timeout)

    def _taken(self) -> subprocess.Popen[bytes] | None:
        """The server's process, which this object lets go of to end it; None when none runs.
        Called with the lock held."""
        self._cancel_thaw_timer()
        process, self._process = self._process, None
        return process

    def _ended(self, *, timeout: float) -> None:
        """After the process ended: not frozen, and its port closed. Called with the lock held."""
        self._frozen = False
        self._wait_port_closed(timeout=timeout)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the server and remove its temporary directory."""
        self.stop()
        _live_servers.discard(self)
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    # -- faults ---------------------------------------------------------

    def freeze(self) -> None:
        """SIGSTOP the server: connections are still accepted by the kernel, nothing answers."""
        with self._lock:
            process = self._require_process()
            self._cancel_thaw_timer()
            self._signal_group(process, signal.SIGSTOP)
            self._frozen = True

    def thaw(self) -> None:
        """SIGCONT a frozen server."""
        with self._lock:
            self._cancel_thaw_timer()
            process = self._process
            if process is not None and process.poll() is None:
                self._signal_group(process, signal.SIGCONT)
            self._frozen = False

    def pause(self, seconds: float) -> None:
        """Freeze now and thaw by itself after ``seconds`` (returns at once)."""
        with self._lock:
            self.freeze()
            timer = threading.Timer(seconds, self.thaw)
            timer.daemon = True
            self._thaw_timer = timer
            timer.start()

    @contextlib.contextmanager
    def frozen_for_block(self) -> Iterator[None]:
        """``with server.frozen_for_block(): ...`` -- frozen inside the block, thawed after."""
        self.freeze()
        try:
            yield
        finally:
            self.thaw()

    def client_pause(self, milliseconds: int) -> None:
        """Redis' own ``CLIENT PAUSE ms ALL``: every client's commands wait that long."""
        self._command_once("CLIENT", "PAUSE", str(milliseconds), "ALL")

    # -- helpers --------------------------------------------------------

    def ping(self, *, timeout: float = 1.0) -> bool:
        return self._ping_once(timeout=timeout)

    def flushall(self) -> None:
        self._command_once("FLUSHALL")

    def _require_process(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is None or process.poll() is not None:
            raise RedisServerError("redis-server is not running")
        return process

    def _cancel_thaw_timer(self) -> None:
        timer = self._thaw_timer
        self._thaw_timer = None
        if timer is not None:
            timer.cancel()

    @staticmethod
    def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)

    def _kill(self, process: subprocess.Popen[bytes]) -> None:
        self._signal_group(process, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)

    def _wait_port_closed(self, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self._host, self._port), timeout=0.2):
                    pass
            except OSError:
                return
            time.sleep(0.02)
        raise RedisServerError(f"port {self._port} still accepts connections after stop()")

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-30:])
        except OSError:
            return "(no log)"

    @staticmethod
    def _encode(*args: str) -> bytes:
        out = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = arg.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        return b"".join(out)

    def _roundtrip(self, sock: socket.socket, *args: str) -> bytes:
        sock.sendall(self._encode(*args))
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            if not chunk:
                raise OSError("connection closed")
            reply += chunk
        return reply

    def _command_once(self, *args: str, timeout: float = 5.0) -> bytes:
        """Send one command on a fresh raw connection (AUTH first when needed)."""
        with socket.create_connection((self._host, self._port), timeout=timeout) as sock:
            if self._password is not None:
                auth = self._roundtrip(sock, "AUTH", self._password)
                if not auth.startswith(b"+OK"):
                    raise RedisServerError(f"AUTH failed: {auth!r}")
            reply = self._roundtrip(sock, *args)
        if reply.startswith(b"-"):
            raise RedisServerError(f"{' '.join(args)} failed: {reply!r}")
        return reply

    def _ping_once(self, *, timeout: float) -> bool:
        try:
            reply = self._command_once("PING", timeout=timeout)
        except OSError:
            return False
        except RedisServerError as e:
            # A server whose password this helper does not know (set in its config file) answers
            # NOAUTH: it is up all the same.
            return "NOAUTH" in str(e)
        return reply.startswith(b"+PONG")
