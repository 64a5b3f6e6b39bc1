"""A real local Kubernetes control plane for the integration tests.

Everything runs from the binaries ``tests/cluster/build.sh`` builds (Kubernetes v1.37.2, an
embedded etcd, kwok), on 127.0.0.1 with free ports, with all state in one work directory:

* etcd;
* kube-apiserver with ``--authorization-mode=Node,RBAC``, the PodSecurity admission plugin,
  ServiceAccount token signing (the TokenRequest API works), a CA made here with the ``openssl``
  CLI, a serving certificate, an admin client certificate (``O=system:masters``) and a static
  admin bearer token (``--token-auth-file``, group ``system:masters``) for clients that cannot
  present a client certificate, such as a TLS-terminating fault proxy;
* kube-controller-manager with the garbage collector, namespace, ServiceAccount, root CA
  publisher, ClusterRole aggregation, Deployment and ReplicaSet controllers;
* kube-scheduler, which binds Pods that have no ``nodeName`` to the fake Node (kwok plays Pods on
  its Nodes but never schedules them);
* kwok as the kubelet of one fake Node (``kwok-node-0``): Pod status is driven by the kwok
  Stages in ``tests/support/kwok/`` (annotation protocol: ``tests/support/pods.py``), and kwok's
  kubelet-like HTTPS server answers the ``containerLogs`` requests kube-apiserver proxies for
  ``GET pods/{name}/log`` (the Node's InternalIP/port and the apiserver's kubelet client flags
  point at it; its serving certificate is checked against the test CA).

Not run: kubelet, kube-proxy, the node lifecycle controller (nothing watches Node heartbeats;
kwok's Node stage removes the ``not-ready`` taint itself) and the legacy ServiceAccount token
Secret controller (tokens come from the TokenRequest API).

Library use::

    plane = start(workdir=tmp, bin_dir=build())
    try:
        ...  # plane.kubeconfig, plane.server, plane.admin_token, plane.service_account_kubeconfig(...)
    finally:
        plane.stop()

Every child runs in its own process group; ``stop()`` kills the groups, an ``atexit`` hook stops
any plane left running, and children started by a process that is not detaching them get
``PR_SET_PDEATHSIG`` so they die with it even when it is killed.

Command line (state in ``${TMPDIR:-/tmp}/agentihooks-swarm-cluster/``)::

    python -m tests.support.cluster up      # build if needed, start detached, print kubeconfig
    python -m tests.support.cluster status  # exit 0 when every process runs and /readyz is ok
    python -m tests.support.cluster env     # export KUBECONFIG=... PATH=<bin>:$PATH ...
    python -m tests.support.cluster down    # stop everything and remove the state
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import http.client
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml  # type: ignore[import-untyped, unused-ignore]

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
BUILD_SCRIPT: Final = REPO_ROOT / "tests" / "cluster" / "build.sh"
KWOK_DIR: Final = Path(__file__).resolve().parent / "kwok"
KUBERNETES_VERSION: Final = "v1.37.2"
NODE_NAME: Final = "kwok-node-0"
SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
SERVICE_CIDR: Final = "10.96.0.0/16"
POD_CIDR: Final = "10.244.0.0/16"
ADMIN_USER: Final = "agentihooks-admin"
STATE_FILE: Final = "state.json"
#: File under ``pod_logs_dir`` kwok serves for a container that has no planted log.
EMPTY_LOG: Final = "empty.log"
#: Set to a state file written by ``up`` to make the pytest fixture reuse that running cluster.
STATE_ENV: Final = "AGENTIHOOKS_SWARM_CLUSTER_STATE"

_CONTROLLERS: Final = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "deployment-controller",
    "replicaset-controller",
)
_POLL_INTERVAL: Final = 0.05
_T = TypeVar("_T")


class ClusterError(RuntimeError):
    """The control plane could not be built, started or reached."""


def state_dir() -> Path:
    """``${TMPDIR:-/tmp}/agentihooks-swarm-cluster``: where the CLI keeps a detached cluster."""
    return Path(os.environ.get("TMPDIR") or "/tmp") / "agentihooks-swarm-cluster"


def build(*, quiet: bool = False) -> Path:
    """Build the binaries (once; cached) with ``tests/cluster/build.sh`` and return the bin dir."""
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if quiet else None,
        check=False,
    )
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace")[-4000:] if quiet else "see the output above"
        raise ClusterError(f"{BUILD_SCRIPT} failed with exit code {result.returncode}: {detail}")
    lines = result.stdout.decode().strip().splitlines()
    if not lines:
        raise ClusterError(f"{BUILD_SCRIPT} printed no bin directory")
    bin_dir = Path(lines[-1])
    if not (bin_dir / "kube-apiserver").exists():
        raise ClusterError(f"{BUILD_SCRIPT} printed {bin_dir}, which has no kube-apiserver")
    return bin_dir


# --------------------------------------------------------------------------------------------
# Processes


@dataclass
class Child:
    """One control-plane process; it leads its own process group (pgid == pid)."""

    name: str
    pid: int
    log: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return _pid_alive(self.pid)

    def exit_code(self) -> int | None:
        return self.popen.poll() if self.popen is not None else None


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # Field 3 (after the parenthesised command) is the state; Z is a zombie.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _pid_runs_from(pid: int, bin_dir: Path) -> bool:
    """Whether ``pid`` still runs one of our binaries (guards against pid reuse)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except OSError:
        return False
    return Path(argv0).parent == bin_dir


def _tie_to_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the thread that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def _kill_groups(children: Sequence[Child]) -> None:
    """SIGKILL each child's process group and reap it.

    No graceful shutdown: the state is thrown away, and kube-apiserver and the embedded etcd
    each take seconds to shut down gracefully (longer when the other is already gone).
    """
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
    for child in children:
        if child.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=10)
        else:
            deadline = time.monotonic() + 10
            while _pid_alive(child.pid) and time.monotonic() < deadline:
                time.sleep(_POLL_INTERVAL)


def _tail(path: Path, *, lines: int = 30) -> str:
    try:
        text = path.read_bytes()[-16384:].decode(errors="replace")
    except OSError as error:
        return f"(no log: {error})"
    return "\n".join(text.splitlines()[-lines:])


def _free_ports(count: int) -> list[int]:
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


# --------------------------------------------------------------------------------------------
# Certificates (openssl CLI; no Python crypto dependency)


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, check=False)
    if result.returncode != 0:
        raise ClusterError(f"openssl {' '.join(args)} failed: {result.stderr.decode(errors='replace')}")


def _make_pki(pki: Path) -> None:
    pki.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
        "-subj", "/CN=agentihooks-swarm-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        cwd=pki,
    )  # fmt: skip
    leaves: dict[str, tuple[str, str, str | None]] = {
        "apiserver": (
            "/CN=kube-apiserver",
            "serverAuth",
            "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
            "DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1",
        ),
        "admin": (f"/O=system:masters/CN={ADMIN_USER}", "clientAuth", None),
        "apiserver-kubelet-client": (
            "/O=system:masters/CN=kube-apiserver-kubelet-client",
            "clientAuth",
            None,
        ),
        "kwok": (f"/CN={NODE_NAME}", "serverAuth", f"DNS:{NODE_NAME},DNS:localhost,IP:127.0.0.1"),
    }
    for name, (subject, usage, san) in leaves.items():
        extensions = ["-addext", f"extendedKeyUsage={usage}", "-addext", "keyUsage=critical,digitalSignature"]
        if san:
            extensions += ["-addext", f"subjectAltName={san}"]
        _openssl(
            "req", "-x509", *ec, "-CA", "ca.crt", "-CAkey", "ca.key", "-days", "3650",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", subject, *extensions,
            cwd=pki,
        )  # fmt: skip
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=pki)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def write_kubeconfig(
    *,
    path: Path,
    server: str,
    ca_file: Path,
    user: str,
    token: str | None = None,
    client_certificate: Path | None = None,
    client_key: Path | None = None,
    namespace: str | None = None,
) -> Path:
    """Write a one-context kubeconfig (token or client certificate) and return its path."""
    credentials: dict[str, str] = {}
    if token is not None:
        credentials["token"] = token
    if client_certificate is not None and client_key is not None:
        credentials["client-certificate"] = str(client_certificate)
        credentials["client-key"] = str(client_key)
    if not credentials:
        raise ValueError("a kubeconfig needs a token or a client certificate and key")
    context: dict[str, str] = {"cluster": "agentihooks-swarm", "user": user}
    if namespace is not None:
        context["namespace"] = namespace
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "agentihooks-swarm",
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": context}],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o600)
    return path


# --------------------------------------------------------------------------------------------
# The control plane


@dataclass
class ControlPlane:
    """A running control plane. ``stop()`` ends every process it started."""

    workdir: Path
    bin_dir: Path
    kubeconfig: Path
    """Admin kubeconfig (client certificate, group system:masters)."""
    token_kubeconfig: Path
    """Admin kubeconfig with the static bearer token instead of the client certificate."""
    server: str
    ca_file: Path
    admin_token: str
    kwok_url: str
    """kwok's kubelet-like server (TLS with the test CA, plain HTTP on the same port)."""
    node_name: str
    pod_logs_dir: Path
    """Where planted container logs live (tests/support/pods.py: plant_log)."""
    children: list[Child] = field(default_factory=list)
    detached: bool = False
    """Started by the CLI to outlive it; stop() is then only called by ``down``."""

    # -- lifecycle ------------------------------------------------------------------------

    def stop(self) -> None:
        """Kill every child's process group, newest first, and wait until they are gone."""
        children = [c for c in reversed(self.children) if c.popen is not None or self._owns(c)]
        _kill_groups(children)
        _LIVE.pop(id(self), None)

    def _owns(self, child: Child) -> bool:
        return _pid_alive(child.pid) and _pid_runs_from(child.pid, self.bin_dir)

    def dead_children(self) -> list[Child]:
        return [c for c in self.children if not c.alive()]

    # -- REST -----------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> tuple[int, bytes]:
        """One blocking HTTPS request to kube-apiserver (admin bearer token unless ``token``)."""
        host, port = self.server.removeprefix("https://").rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(self.ca_file))
        connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=timeout)
        headers = {"Authorization": f"Bearer {token or self.admin_token}", "Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def request_json(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, *, ok: Iterable[int] = (200, 201)
    ) -> dict[str, Any]:
        status, data = self.request(method, path, body)
        if status not in set(ok):
            raise ClusterError(f"{method} {path} answered {status}: {data[:2000].decode(errors='replace')}")
        result: dict[str, Any] = json.loads(data) if data else {}
        return result

    def kwok_get(self, path: str, *, timeout: float = 10.0) -> tuple[int, bytes]:
        """A plain-HTTP GET to kwok's kubelet-like server (same port as its TLS listener)."""
        host, port = self.kwok_url.removeprefix("https://").rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def service_account_kubeconfig(
        self,
        *,
        namespace: str,
        name: str,
        path: Path,
        expiration_seconds: int = 3600,
        server: str | None = None,
    ) -> Path:
        """Write a kubeconfig that authenticates as ServiceAccount ``namespace/name``.

        The bearer token comes from the TokenRequest API, so RBAC applies to it as to a Pod's
        token. ``server`` points the kubeconfig elsewhere (a proxy) while keeping the CA.
        """
        token_request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds},
        }
        answer = self.request_json(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", token_request
        )
        return write_kubeconfig(
            path=path,
            server=server or self.server,
            ca_file=self.ca_file,
            user=f"system:serviceaccount:{namespace}:{name}",
            token=answer["status"]["token"],
            namespace=namespace,
        )

    # -- state (CLI) ----------------------------------------------------------------------

    def save(self, path: Path) -> None:
        data = {
            "workdir": str(self.workdir),
            "bin_dir": str(self.bin_dir),
            "kubeconfig": str(self.kubeconfig),
            "token_kubeconfig": str(self.token_kubeconfig),
            "server": self.server,
            "ca_file": str(self.ca_file),
            "admin_token": self.admin_token,
            "kwok_url": self.kwok_url,
            "node_name": self.node_name,
            "pod_logs_dir": str(self.pod_logs_dir),
            "children": [{"name": c.name, "pid": c.pid, "log": str(c.log)} for c in self.children],
        }
        path.write_text(json.dumps(data, indent=2) + "\n")
        path.chmod(0o600)

    @classmethod
    def load(cls, path: Path) -> ControlPlane:
        data = json.loads(path.read_text())
        return cls(
            workdir=Path(data["workdir"]),
            bin_dir=Path(data["bin_dir"]),
            kubeconfig=Path(data["kubeconfig"]),
            token_kubeconfig=Path(data["token_kubeconfig"]),
            server=data["server"],
            ca_file=Path(data["ca_file"]),
            admin_token=data["admin_token"],
            kwok_url=data["kwok_url"],
            node_name=data["node_name"],
            pod_logs_dir=Path(data["pod_logs_dir"]),
            children=[Child(name=c["name"], pid=c["pid"], log=Path(c["log"])) for c in data["children"]],
            detached=True,
        )

    def healthy(self) -> bool:
        if any(not c.alive() for c in self.children):
            return False
        try:
            status, body = self.request("GET", "/readyz", timeout=5)
        except OSError:
            return False
        return status == 200 and body.strip() == b"ok"


_LIVE: dict[int, ControlPlane] = {}


@atexit.register
def _stop_leftovers() -> None:
    for plane in list(_LIVE.values()):
        if not plane.detached:
            plane.stop()


class _Starter:
    """Starts the processes of one ControlPlane and turns failures into readable errors."""

    def __init__(self, plane: ControlPlane, *, deadline: float) -> None:
        self.plane = plane
        self.deadline = deadline
        (plane.workdir / "log").mkdir(parents=True, exist_ok=True)

    def spawn(self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> Child:
        log = self.plane.workdir / "log" / f"{name}.log"
        tie = not self.plane.detached and threading.current_thread() is threading.main_thread()
        with log.open("ab") as out:
            out.write(f"$ {shlex.join(argv)}\n".encode())
            out.flush()
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.plane.workdir,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                preexec_fn=_tie_to_parent if tie else None,
            )
        child = Child(name=name, pid=popen.pid, log=log, popen=popen)
        self.plane.children.append(child)
        return child

    def fail(self, message: str) -> ClusterError:
        parts = [message]
        for child in self.plane.children:
            code = child.exit_code()
            state = "running" if code is None else f"exited with {code}"
            parts.append(f"--- {child.name} ({state}), last lines of {child.log}:\n{_tail(child.log)}")
        return ClusterError("\n".join(parts))

    def wait(self, what: str, check: Callable[[], _T | None]) -> _T:
        last_error: BaseException | None = None
        while True:
            dead = self.plane.dead_children()
            if dead:
                raise self.fail(f"{dead[0].name} exited while waiting for {what}")
            try:
                result = check()
            except (OSError, http.client.HTTPException, ClusterError) as error:
                result, last_error = None, error
            if result is not None:
                return result
            if time.monotonic() > self.deadline:
                raise self.fail(f"timed out waiting for {what} (last error: {last_error!r})")
            time.sleep(_POLL_INTERVAL)


def start(*, workdir: Path, bin_dir: Path, timeout: float = 120.0, detached: bool = False) -> ControlPlane:
    """Start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok.

    Returns once /readyz is ok, the fake Node is Ready and untainted, the scheduler is healthy and
    the ``default`` ServiceAccount of namespace ``default`` exists and gets tokens. A port taken
    by someone else between choosing and binding it costs a retry with fresh ports.
    """
    workdir = workdir.resolve()
    bin_dir = bin_dir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    attempts = 3
    for attempt in range(1, attempts + 1):
        try:
            return _start_once(workdir=workdir, bin_dir=bin_dir, deadline=deadline, detached=detached)
        except ClusterError as error:
            if attempt == attempts or "address already in use" not in str(error):
                raise
            shutil.rmtree(workdir / "etcd", ignore_errors=True)
            (workdir / "log").rename(workdir / f"log.failed-{attempt}")
    raise AssertionError("unreachable")


def _start_once(*, workdir: Path, bin_dir: Path, deadline: float, detached: bool) -> ControlPlane:
    pki = workdir / "pki"
    _make_pki(pki)
    admin_token = secrets.token_hex(24)
    (pki / "tokens.csv").write_text(f'{admin_token},{ADMIN_USER},{ADMIN_USER}-uid,"system:masters"\n')
    (pki / "tokens.csv").chmod(0o600)
    etcd_port, etcd_peer_port, api_port, kwok_port, kcm_port, scheduler_port = _free_ports(6)
    server = f"https://127.0.0.1:{api_port}"
    kubeconfig = write_kubeconfig(
        path=workdir / "admin.kubeconfig",
        server=server,
        ca_file=pki / "ca.crt",
        user=ADMIN_USER,
        client_certificate=pki / "admin.crt",
        client_key=pki / "admin.key",
    )
    token_kubeconfig = write_kubeconfig(
        path=workdir / "admin-token.kubeconfig",
        server=server,
        ca_file=pki / "ca.crt",
        user=ADMIN_USER,
        token=admin_token,
    )
    pod_logs_dir = workdir / "pod-logs"
    pod_logs_dir.mkdir(exist_ok=True)
    plane = ControlPlane(
        workdir=workdir,
        bin_dir=bin_dir,
        kubeconfig=kubeconfig,
        token_kubeconfig=token_kubeconfig,
        server=server,
        ca_file=pki / "ca.crt",
        admin_token=admin_token,
        kwok_url=f"https://127.0.0.1:{kwok_port}",
        node_name=NODE_NAME,
        pod_logs_dir=pod_logs_dir,
        detached=detached,
    )
    _LIVE[id(plane)] = plane
    starter = _Starter(plane, deadline=deadline)
    try:
        _start_processes(
            starter,
            pki=pki,
            ports={
                "etcd": etcd_port,
                "etcd-peer": etcd_peer_port,
                "kwok": kwok_port,
                "kcm": kcm_port,
                "scheduler": scheduler_port,
                "apiserver": api_port,
            },
        )
    except BaseException:
        plane.stop()
        raise
    return plane


def _start_processes(starter: _Starter, *, pki: Path, ports: Mapping[str, int]) -> None:
    plane = starter.plane
    binary = plane.bin_dir.joinpath
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    starter.spawn(
        "etcd",
        [
            str(binary("etcd")),
            f"--data-dir={plane.workdir / 'etcd'}",
            f"--listen-client-url={etcd_url}",
            f"--listen-peer-url=http://127.0.0.1:{ports['etcd-peer']}",
        ],
    )
    starter.wait("etcd /health", lambda: _http_ok(f"{etcd_url}/health", b'"health":"true"'))

    starter.spawn(
        "kube-apiserver",
        [
            str(binary("kube-apiserver")),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction,PodSecurity",
            "--allow-privileged=true",  # as in kind: Pod Security admission decides, not this flag
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
            # The default reconciler would publish 127.0.0.1 as the `kubernetes` Endpoints, which
            # validation rejects (loopback); nothing in the tests needs that Service.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        ],
    )
    starter.wait("kube-apiserver /readyz", lambda: _api_ok(plane, "/readyz"))

    for crd in yaml.safe_load_all((KWOK_DIR / "crds.yaml").read_text()):
        _create(plane, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    _create(
        plane,
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": plane.node_name,
                "labels": {
                    "kubernetes.io/hostname": plane.node_name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                },
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            },
        },
    )
    kubeconfig = str(plane.kubeconfig)
    starter.spawn(
        "kube-controller-manager",
        [
            str(binary("kube-controller-manager")),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kcm']}",
            "--leader-elect=false",
            f"--controllers={','.join(_CONTROLLERS)}",
            f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=false",
            "--profiling=false",
        ],
    )
    starter.spawn(
        "kube-scheduler",
        [
            str(binary("kube-scheduler")),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['scheduler']}",
            "--leader-elect=false",
            "--profiling=false",
        ],
    )

    starter.wait("the kwok Logs CRD to be established", lambda: _crd_established(plane, "logs.kwok.x-k8s.io"))
    # A fresh CRD answers 429 until its storage is ready; kwok's informer would back off on that.
    starter.wait(
        "the kwok Logs API to list", lambda: _api_ok(plane, "/apis/kwok.x-k8s.io/v1alpha1/logs", expect=None)
    )

    kwok_config = _write_kwok_config(plane, pki=pki, port=ports["kwok"])
    starter.spawn(
        "kwok",
        [str(binary("kwok")), f"--kubeconfig={kubeconfig}", f"--config={kwok_config}"],
        env={"KWOK_WORKDIR": str(plane.workdir / "kwok-home")},
    )

    starter.wait(f"Node {plane.node_name} Ready and untainted", lambda: _node_ready(plane, ports["kwok"]))
    starter.wait("kwok /healthz", lambda: _http_ok(f"http://127.0.0.1:{ports['kwok']}/healthz", b"ok"))
    starter.wait("kube-scheduler /healthz", lambda: _https_insecure_ok(ports["scheduler"]))
    starter.wait("kube-controller-manager /healthz", lambda: _https_insecure_ok(ports["kcm"]))
    starter.wait(
        "ServiceAccount default/default",
        lambda: _api_ok(plane, "/api/v1/namespaces/default/serviceaccounts/default", expect=None),
    )
    starter.wait("a TokenRequest for default/default", lambda: _token_request_ok(plane))
    # kwok's Logs informer is asynchronous: wait until a planted log is served.
    readiness = plane.pod_logs_dir / "readiness.log"
    readiness.write_bytes(b"2000-01-01T00:00:00.000000000Z stdout F ready\n")
    _create(
        plane,
        "/apis/kwok.x-k8s.io/v1alpha1/namespaces/kube-system/logs",
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": "kwok-logs-readiness", "namespace": "kube-system"},
            "spec": {"logs": [{"logsFile": str(readiness)}]},
        },
    )
    starter.wait("kwok to serve planted logs", lambda: _kwok_serves(plane, b"ready\n"))


def _write_kwok_config(plane: ControlPlane, *, pki: Path, port: int) -> Path:
    empty_log = plane.pod_logs_dir / EMPTY_LOG
    empty_log.touch()
    documents: list[Any] = [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": {
                "manageNodesWithAnnotationSelector": "kwok.x-k8s.io/node=fake",
                "nodeIP": "127.0.0.1",
                "nodeName": plane.node_name,
                "nodePort": port,
                "serverAddress": f"127.0.0.1:{port}",
                "tlsCertFile": str(pki / "kwok.crt"),
                "tlsPrivateKeyFile": str(pki / "kwok.key"),
                "cidr": POD_CIDR,
                "enableCRDs": ["Logs"],
                "enableDebuggingHandlers": True,
                "enableProfilingHandler": False,
                "enableContentionProfiling": False,
                "nodeLeaseDurationSeconds": 0,
                "nodeLeaseParallelism": 1,
                "podPlayStageParallelism": 4,
                "nodePlayStageParallelism": 1,
                "podsOnNodeSyncParallelism": 1,
                "enablePodsOnNodeSyncListPager": True,
                "enablePodsOnNodeSyncStreamWatch": False,
            },
        }
    ]
    for name in ("node.yaml", "pods.yaml"):
        documents.extend(d for d in yaml.safe_load_all((KWOK_DIR / name).read_text()) if d)
    # A container without a planted log has printed nothing (kwok would otherwise answer 400).
    documents.append(
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterLogs",
            "metadata": {"name": "agentihooks-no-output"},
            "spec": {"logs": [{"logsFile": str(empty_log)}]},
        }
    )
    path = plane.workdir / "kwok.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def _create(plane: ControlPlane, collection: str, body: Mapping[str, Any]) -> None:
    status, data = plane.request("POST", collection, body)
    if status not in (200, 201, 409):
        raise ClusterError(f"POST {collection} answered {status}: {data[:2000].decode(errors='replace')}")


def _http_ok(url: str, needle: bytes) -> bool | None:
    host, _, rest = url.removeprefix("http://").partition("/")
    name, port = host.rsplit(":", 1)
    connection = http.client.HTTPConnection(name, int(port), timeout=2)
    try:
        connection.request("GET", "/" + rest)
        response = connection.getresponse()
        return True if response.status == 200 and needle in response.read() else None
    finally:
        connection.close()


def _https_insecure_ok(port: int) -> bool | None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=2)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        return True if response.status == 200 and response.read().strip() == b"ok" else None
    finally:
        connection.close()


def _api_ok(plane: ControlPlane, path: str, *, expect: bytes | None = b"ok") -> bool | None:
    status, body = plane.request("GET", path, timeout=5)
    if status != 200:
        return None
    return True if expect is None or body.strip() == expect else None


def _crd_established(plane: ControlPlane, name: str) -> bool | None:
    crd = plane.request_json("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    conditions = crd.get("status", {}).get("conditions", [])
    established = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
    return True if established else None


def _node_ready(plane: ControlPlane, kwok_port: int) -> bool | None:
    node = plane.request_json("GET", f"/api/v1/nodes/{plane.node_name}")
    status = node.get("status", {})
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
    port = status.get("daemonEndpoints", {}).get("kubeletEndpoint", {}).get("Port")
    tainted = any(t["key"] == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints", []))
    return True if ready and port == kwok_port and not tainted else None


def _kwok_serves(plane: ControlPlane, content: bytes) -> bool | None:
    status, body = plane.kwok_get("/containerLogs/kube-system/kwok-logs-readiness/probe", timeout=2)
    return True if (status, body) == (200, content) else None


def _token_request_ok(plane: ControlPlane) -> bool | None:
    status, _ = plane.request(
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/default/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return True if status == 201 else None


# --------------------------------------------------------------------------------------------
# Command line


def _load_state() -> ControlPlane | None:
    path = state_dir() / STATE_FILE
    if not path.exists():
        return None
    return ControlPlane.load(path)


def _env_lines(plane: ControlPlane) -> list[str]:
    return [
        f"export KUBECONFIG={shlex.quote(str(plane.kubeconfig))}",
        f'export PATH={shlex.quote(str(plane.bin_dir))}:"$PATH"',
        f"export {STATE_ENV}={shlex.quote(str(plane.workdir / STATE_FILE))}",
    ]


def _cli_up() -> int:
    existing = _load_state()
    if existing is not None:
        if existing.healthy():
            print(existing.kubeconfig)
            print(_env_lines(existing)[0])
            return 0
        print("cluster: removing a stale cluster state", file=sys.stderr)
        existing.stop()
    shutil.rmtree(state_dir(), ignore_errors=True)
    bin_dir = build()
    began = time.monotonic()
    plane = start(workdir=state_dir(), bin_dir=bin_dir, detached=True)
    plane.save(state_dir() / STATE_FILE)
    print(f"cluster: up in {time.monotonic() - began:.1f}s, logs in {plane.workdir / 'log'}", file=sys.stderr)
    print(plane.kubeconfig)
    print(_env_lines(plane)[0])
    return 0


def _cli_down() -> int:
    existing = _load_state()
    if existing is not None:
        existing.stop()
        leftovers = [c for c in existing.children if existing._owns(c)]
        if leftovers:
            print(f"cluster: could not stop {[c.name for c in leftovers]}", file=sys.stderr)
            return 1
    shutil.rmtree(state_dir(), ignore_errors=True)
    print("cluster: down", file=sys.stderr)
    return 0


def _cli_status() -> int:
    existing = _load_state()
    if existing is None:
        print("cluster: not up")
        return 1
    for child in existing.children:
        print(f"{child.name:<24} pid {child.pid:<8} {'running' if child.alive() else 'NOT RUNNING'}")
    healthy = existing.healthy()
    print(f"{'kube-apiserver /readyz':<24} {'ok' if healthy else 'NOT OK'}  {existing.server}")
    print(f"{'kubeconfig':<24} {existing.kubeconfig}")
    return 0 if healthy else 1


def _cli_env() -> int:
    existing = _load_state()
    if existing is None:
        print("cluster: not up (run: python -m tests.support.cluster up)", file=sys.stderr)
        return 1
    print("\n".join(_env_lines(existing)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.cluster", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("command", choices=["up", "down", "status", "env"])
    arguments = parser.parse_args(argv)
    commands: dict[str, Callable[[], int]] = {
        "up": _cli_up,
        "down": _cli_down,
        "status": _cli_status,
        "env": _cli_env,
    }
    try:
        return commands[arguments.command]()
    except ClusterError as error:
        print(f"cluster: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
