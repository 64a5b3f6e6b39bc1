"""The real node: containerd and a real kubelet run the Pods' containers on this machine, with
kube-proxy (nftables mode) and CoreDNS as the cluster's Service network and DNS.

Every program comes from Debian's packages (containerd, runc, the CNI plugins; installed by
:func:`ensure_packages`) or from ``tests/tools/binaries/build.sh`` (kubelet, kube-proxy, CoreDNS), with
its state below the cluster's work directory. What it changes on the machine itself is recorded
and put back by :mod:`.host`.

Facts this relies on (found on this machine kind, see ``shared/notes/real-node-probe``):

* runc cannot lower ``oom_score_adj`` here (no CAP_SYS_RESOURCE in the VM): containerd's CRI
  plugin runs with ``restrict_oom_score_adj = true``.
* A kubelet refuses a loopback node IP: the node's address is :data:`.host.NODE_IP` on ``lo``,
  also the kubelet's serving address and an IP SAN of its certificate.
* kubelet 1.37 on cgroup v1 needs ``failCgroupV1: false`` and ``cgroupDriver: cgroupfs``.

The Pod network is the ``ptp`` CNI plugin: one veth pair per Pod, routed through the host, so
Pod-to-Service-to-Pod traffic passes the host's conntrack without a bridge.
PersistentVolumeClaims get host-path volumes from the default StorageClass ``standard``
(:mod:`.provisioner`), as on kind. Pods get routes to
the Pod, Service and node ranges only (no default route) and there is no masquerading: nothing a
Pod sends can leave the machine. CoreDNS answers ``cluster.local`` only (no ``forward``), and
containerd's registry hosts point every well-known registry at a closed loopback port, so a
missing image fails at once instead of being pulled from anywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

import yaml  # type: ignore[import-untyped, unused-ignore]

from tests.support import progress
from tests.support.cluster import host
from tests.support.cluster.pki import write_kubeconfig
from tests.support.cluster.processes import Child, ClusterError, Starter, free_ports, kill_groups

if TYPE_CHECKING:
    from tests.support.cluster.control_plane import ControlPlane

NODE_NAME: Final = "agentihooks-node-0"
POD_SUBNET: Final = "10.244.0.0/24"
CLUSTER_DOMAIN: Final = "cluster.local"
#: Debian packages the real node needs (``ctr`` comes with containerd).
PACKAGES: Final = ("containerd", "runc", "containernetworking-plugins", "iptables", "nftables")
CNI_BIN_DIR: Final = "/usr/lib/cni"
#: The progress stages of :func:`start`.
STAGES: Final = 4
#: Registries a Pod's image name may point at by default; each goes to a closed loopback port.
_BLOCKED_REGISTRIES: Final = (
    "docker.io",
    "registry-1.docker.io",
    "registry.k8s.io",
    "k8s.gcr.io",
    "gcr.io",
    "ghcr.io",
    "quay.io",
)


@dataclass(frozen=True)
class Images:
    """The images a real node starts with (nothing is ever pulled): reference -> image archive
    (docker-archive or OCI layout tar), and which of them is the Pod sandbox (pause) image."""

    archives: Mapping[str, Path]
    sandbox: str


def ensure_packages(*, out: TextIO | None = None) -> None:
    """Install the Debian packages the node needs when a command of theirs is missing (root)."""
    needed = {"containerd": "containerd", "runc": "runc", "iptables": "iptables", "nft": "nftables"}
    missing = [package for command, package in needed.items() if shutil.which(command) is None]
    if not Path(CNI_BIN_DIR, "ptp").exists():
        missing.append("containernetworking-plugins")
    if not missing:
        return
    if os.geteuid() != 0:
        raise ClusterError(
            f"the real node needs the Debian packages {' '.join(missing)}, and installing them needs root:"
            f" run 'sudo apt-get install {' '.join(missing)}' (or 'make system-deps' as root)"
        )
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    steps = progress.Progress(log=progress.log_path("real-node-packages.log"), total=2, out=out)
    steps.say(f"cluster: installing the real node's Debian packages; details in {steps.log}")
    try:
        with steps.stage("apt-get update"):
            steps.run(["apt-get", "update"], env=env)
        with steps.stage(f"apt-get install {' '.join(missing)}"):
            steps.run(["apt-get", "install", "-y", *missing], env=env)
    except progress.StageFailed as error:
        raise ClusterError(str(error)) from error


def containerd_socket(workdir: Path) -> Path:
    return host.runtime_dir(workdir) / "containerd.sock"


def ctr(workdir: Path, *args: str, timeout: float = 120) -> str:
    """Run ``ctr`` against this node's containerd in the CRI namespace ``k8s.io``."""
    argv = ["ctr", "--address", str(containerd_socket(workdir)), "--namespace", "k8s.io", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def start(
    plane: ControlPlane, starter: Starter, *, pki: Path, images: Images, steps: progress.Progress
) -> None:
    """Start containerd (loading ``images``), the kubelet, kube-proxy and CoreDNS; return once the
    node is Ready and untainted and DNS answers. :data:`STAGES` stages on ``steps``."""
    workdir = plane.workdir
    kubelet_port, healthz_port, proxy_healthz, proxy_metrics, dns_health, dns_ready = free_ports(6)
    with steps.stage("containerd, and the images imported into it"):
        _start_containerd(workdir, starter, images=images)
    with steps.stage("kubelet"):
        _start_kubelet(plane, starter, pki=pki, kubelet_port=kubelet_port, healthz_port=healthz_port)
    with steps.stage("kube-proxy and CoreDNS"):
        _start_network(
            plane,
            starter,
            pki=pki,
            proxy_healthz=proxy_healthz,
            proxy_metrics=proxy_metrics,
            dns_health=dns_health,
            dns_ready=dns_ready,
        )
    with steps.stage("volume provisioner"):
        _start_provisioner(plane, starter)


def _start_containerd(workdir: Path, starter: Starter, *, images: Images) -> None:
    containerd_config = _write_containerd_config(workdir, sandbox_image=images.sandbox)
    starter.spawn("containerd", ["containerd", "--config", str(containerd_config)])
    starter.wait("containerd to answer", lambda: bool(ctr(workdir, "version", timeout=5)) or None)
    for reference, archive in images.archives.items():
        ctr(workdir, "images", "import", str(archive), timeout=300)
        if reference not in ctr(workdir, "images", "list", "-q"):
            raise ClusterError(f"importing {archive} did not give image {reference}")


def _start_kubelet(
    plane: ControlPlane, starter: Starter, *, pki: Path, kubelet_port: int, healthz_port: int
) -> None:
    from tests.support.cluster import control_plane as cp

    workdir = plane.workdir
    kubelet_kubeconfig = write_kubeconfig(
        path=workdir / "kubelet.kubeconfig",
        server=plane.server,
        ca_file=pki / "ca.crt",
        user=f"system:node:{NODE_NAME}",
        client_certificate=pki / "kubelet-client.crt",
        client_key=pki / "kubelet-client.key",
    )
    kubelet_config = _write_kubelet_config(workdir, pki=pki, port=kubelet_port, healthz_port=healthz_port)
    starter.spawn(
        "kubelet",
        [
            str(plane.bin_dir / "kubelet"),
            f"--config={kubelet_config}",
            f"--kubeconfig={kubelet_kubeconfig}",
            f"--root-dir={workdir / 'kubelet'}",
            f"--cert-dir={workdir / 'kubelet' / 'pki'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={host.NODE_IP}",
            "-v=1",
        ],
    )
    starter.wait(f"Node {NODE_NAME} Ready and untainted", lambda: cp.node_ready(plane, port=kubelet_port))


def _start_network(
    plane: ControlPlane,
    starter: Starter,
    *,
    pki: Path,
    proxy_healthz: int,
    proxy_metrics: int,
    dns_health: int,
    dns_ready: int,
) -> None:
    """kube-proxy (the Services) and CoreDNS (their names)."""
    from tests.support.cluster import control_plane as cp

    workdir = plane.workdir
    proxy_kubeconfig = write_kubeconfig(
        path=workdir / "kube-proxy.kubeconfig",
        server=plane.server,
        ca_file=pki / "ca.crt",
        user="system:kube-proxy",
        client_certificate=pki / "kube-proxy.crt",
        client_key=pki / "kube-proxy.key",
    )
    proxy_config = workdir / "kube-proxy.yaml"
    proxy_config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                "kind": "KubeProxyConfiguration",
                "clientConnection": {"kubeconfig": str(proxy_kubeconfig)},
                "hostnameOverride": NODE_NAME,
                "bindAddress": host.NODE_IP,
                "healthzBindAddress": f"127.0.0.1:{proxy_healthz}",
                "metricsBindAddress": f"127.0.0.1:{proxy_metrics}",
                "mode": "nftables",
                "clusterCIDR": "10.244.0.0/16",
                "detectLocalMode": "ClusterCIDR",
                # NodePorts only on the node's own address; conntrack sysctls left as they are.
                "nodePortAddresses": [f"{host.NODE_IP}/32"],
                "conntrack": {
                    "maxPerCore": 0,
                    "min": 0,
                    "tcpEstablishedTimeout": "0s",
                    "tcpCloseWaitTimeout": "0s",
                },
            }
        )
    )
    starter.spawn("kube-proxy", [str(plane.bin_dir / "kube-proxy"), f"--config={proxy_config}", "-v=1"])
    starter.wait("kube-proxy /healthz", lambda: cp.http_ok(f"http://127.0.0.1:{proxy_healthz}/healthz", b""))

    corefile = workdir / "Corefile"
    corefile.write_text(
        f"{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{\n"
        f"    bind {host.NODE_IP}\n"
        "    errors\n"
        f"    health 127.0.0.1:{dns_health}\n"
        f"    ready 127.0.0.1:{dns_ready}\n"
        f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
        f"        kubeconfig {plane.kubeconfig} agentihooks-admin\n"
        "        ttl 5\n"
        "    }\n"
        "    cache 5\n"
        "}\n"
        # Every other name: refused here, never forwarded.
        f".:53 {{\n    bind {host.NODE_IP}\n    errors\n}}\n"
    )
    starter.spawn("coredns", [str(plane.bin_dir / "coredns"), "-conf", str(corefile)])
    starter.wait("CoreDNS /ready", lambda: cp.http_ok(f"http://127.0.0.1:{dns_ready}/ready", b"OK"))


def _start_provisioner(plane: ControlPlane, starter: Starter) -> None:
    from tests.support.cluster import control_plane as cp

    workdir = plane.workdir
    state = workdir / "provisioner-state.json"
    plane.save(state)
    starter.spawn(
        "provisioner",
        [sys.executable, "-m", "tests.support.cluster.provisioner", str(state), str(workdir / "volumes")],
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    starter.wait(
        "the default StorageClass",
        lambda: cp.api_ok(plane, "/apis/storage.k8s.io/v1/storageclasses/standard", expect=None),
    )


def stop(*, workdir: Path, children: Sequence[Child], bin_dir: Path) -> None:
    """Stop the kubelet first (so nothing restarts), then every container through containerd,
    then containerd; :func:`.host.release` ends any shim left and unmounts what they mounted."""
    kubelet = [c for c in children if c.name == "kubelet"]
    kill_groups(kubelet)
    containerd = next((c for c in children if c.name == "containerd" and c.alive()), None)
    if containerd is not None:
        with contextlib.suppress(ClusterError, subprocess.TimeoutExpired):
            tasks = ctr(workdir, "tasks", "list", "-q", timeout=10).split()
            for task in tasks:
                with contextlib.suppress(ClusterError):
                    ctr(workdir, "tasks", "kill", "--all", "--signal", "SIGKILL", task, timeout=10)
            deadline = time.monotonic() + 10
            for task in tasks:
                while time.monotonic() < deadline:
                    try:
                        ctr(workdir, "tasks", "delete", "--force", task, timeout=10)
                        break
                    except ClusterError as error:
                        if "not found" in str(error):
                            break
                        time.sleep(0.1)
        kill_groups([containerd])


def _write_containerd_config(workdir: Path, *, sandbox_image: str) -> Path:
    base = workdir / "containerd"
    for sub in ("root", "state", "runc", "opt", "certs.d"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    host.runtime_dir(workdir).mkdir(parents=True, exist_ok=True)
    for registry in _BLOCKED_REGISTRIES:
        hosts = base / "certs.d" / registry / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        # A closed port on loopback: an image that is not loaded fails to pull at once.
        hosts.write_text('server = "http://127.0.0.1:9"\n')
    cni_conf = workdir / "cni" / "net.d"
    cni_conf.mkdir(parents=True, exist_ok=True)
    network = {
        "cniVersion": "1.0.0",
        "name": "agentihooks",
        "plugins": [
            {
                "type": "ptp",
                "ipMasq": False,
                "mtu": 1500,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(workdir / "cni" / "ipam"),
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [
                        {"dst": "10.244.0.0/16"},
                        {"dst": "10.96.0.0/16"},
                        {"dst": f"{host.NODE_IP}/32"},
                    ],
                },
            }
        ],
    }
    (cni_conf / "10-agentihooks.conflist").write_text(json.dumps(network, indent=2))
    config = f"""version = 2
root = "{base / "root"}"
state = "{base / "state"}"
[grpc]
  address = "{containerd_socket(workdir)}"
[ttrpc]
  address = "{containerd_socket(workdir)}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{base / "opt"}"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{sandbox_image}"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "{CNI_BIN_DIR}"
      conf_dir = "{cni_conf}"
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "{base / "certs.d"}"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "{base / "runc"}"
"""
    path = base / "config.toml"
    path.write_text(config)
    return path


def _write_kubelet_config(workdir: Path, *, pki: Path, port: int, healthz_port: int) -> Path:
    resolv = workdir / "resolv.conf"
    resolv.write_text("")  # Pods inherit no search domains or nameservers of the machine
    pod_logs = workdir / "pod-logs"
    pod_logs.mkdir(exist_ok=True)
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{host.CGROUP_ROOT}",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{containerd_socket(workdir)}",
        "address": host.NODE_IP,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDNS": [host.NODE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(resolv),
        "podLogsDir": str(pod_logs),
        "staticPodPath": "",
        "nodeStatusUpdateFrequency": "10s",
        "nodeStatusReportFrequency": "1m",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "imageMinimumGCAge": "24h",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "maxPods": 60,
        "serializeImagePulls": False,
    }
    path = workdir / "kubelet.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
