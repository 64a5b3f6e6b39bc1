"""A throwaway certificate authority and server certificates for TLS tests (the ``openssl`` CLI,
as the cluster's own certificates are made; no Python crypto dependency)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path


class TlsError(RuntimeError):
    """openssl is missing or refused to make a certificate."""


def _openssl(*args: str, cwd: Path) -> None:
    try:
        result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, check=False)
    except FileNotFoundError:
        raise TlsError("openssl is not installed: run 'make system-deps' as root") from None
    if result.returncode != 0:
        raise TlsError(f"openssl {' '.join(args)} failed: {result.stderr.decode(errors='replace')}")


@dataclasses.dataclass(frozen=True)
class ServerCert:
    ca: Path
    cert: Path
    key: Path


def server_cert(directory: Path, *, names: str) -> ServerCert:
    """A new CA in ``directory`` and a server certificate it signed for ``names``, an OpenSSL
    subjectAltName list such as ``DNS:elsewhere.example`` or ``IP:127.0.0.1``."""
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *curve, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
             "-subj", "/CN=test-ca", cwd=directory)  # fmt: skip
    _openssl("req", *curve, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=server",
             cwd=directory)  # fmt: skip
    (directory / "server.ext").write_text(f"subjectAltName={names}\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "server.ext",
             cwd=directory)  # fmt: skip
    return ServerCert(ca=directory / "ca.crt", cert=directory / "server.crt", key=directory / "server.key")


def redis_tls_args(cert: ServerCert, *, port: int) -> tuple[str, ...]:
    """``RedisServer(extra_args=...)`` for a TLS port beside the plain one (which the helper pings)."""
    return (
        "--tls-port", str(port),
        "--tls-cert-file", str(cert.cert),
        "--tls-key-file", str(cert.key),
        "--tls-ca-cert-file", str(cert.ca),
        "--tls-auth-clients", "no",
    )  # fmt: skip
