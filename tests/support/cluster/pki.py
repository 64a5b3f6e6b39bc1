"""The cluster's certificates and kubeconfigs (the ``openssl`` CLI; no Python crypto dependency).

One CA signs everything: kube-apiserver's serving certificate, the admin client certificate
(``O=system:masters``), the apiserver's kubelet client, and the node's certificates: kwok's
serving certificate, or a real kubelet's serving and client (``system:node:<name>``) certificates.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final

import yaml  # type: ignore[import-untyped, unused-ignore]

from tests.support.cluster.processes import ClusterError

ADMIN_USER: Final = "agentihooks-admin"
#: The first address of the Service range: the `kubernetes` Service's ClusterIP.
KUBERNETES_SERVICE_IP: Final = "10.96.0.1"


def _openssl(*args: str, cwd: Path) -> None:
    try:
        result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, check=False)
    except FileNotFoundError:
        raise ClusterError(
            "openssl is not installed (the cluster's certificates are made with it): run"
            " 'make system-deps-kwok' as root, or 'sudo apt-get install openssl'"
        ) from None
    if result.returncode != 0:
        raise ClusterError(f"openssl {' '.join(args)} failed: {result.stderr.decode(errors='replace')}")


def make_pki(pki: Path, *, node_name: str, node_ip: str, real_node: bool) -> None:
    """Write ``ca``, ``apiserver``, ``admin``, ``apiserver-kubelet-client`` and the node's
    certificates (``kwok``, or ``kubelet-serving`` and ``kubelet-client``) plus the ServiceAccount
    signing key pair ``sa.key``/``sa.pub`` into ``pki``."""
    pki.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
        "-subj", "/CN=agentihooks-swarm-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        cwd=pki,
    )  # fmt: skip
    extra_ip = f",IP:{node_ip}" if node_ip != "127.0.0.1" else ""
    node_sans = f"DNS:{node_name},DNS:localhost,IP:127.0.0.1{extra_ip}"
    leaves: dict[str, tuple[str, str, str | None]] = {
        "apiserver": (
            "/CN=kube-apiserver",
            "serverAuth",
            "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
            f"DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:{KUBERNETES_SERVICE_IP}" + extra_ip,
        ),
        "admin": (f"/O=system:masters/CN={ADMIN_USER}", "clientAuth", None),
        "apiserver-kubelet-client": (
            "/O=system:masters/CN=kube-apiserver-kubelet-client",
            "clientAuth",
            None,
        ),
    }
    if real_node:
        leaves["kubelet-serving"] = (f"/O=system:nodes/CN=system:node:{node_name}", "serverAuth", node_sans)
        leaves["kubelet-client"] = (f"/O=system:nodes/CN=system:node:{node_name}", "clientAuth", None)
        leaves["kube-proxy"] = ("/CN=system:kube-proxy", "clientAuth", None)
    else:
        leaves["kwok"] = (f"/CN={node_name}", "serverAuth", node_sans)
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
