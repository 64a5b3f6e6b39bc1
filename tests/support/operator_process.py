"""The operator as its users run it: ``python -m agentihooks_swarm run`` in a child process.

End-to-end tests start it against the real control plane (directly, through the fault proxy, or
as a ServiceAccount), point it at the real redis-server, and SIGKILL it at checkpoints to prove
restart safety. Its log goes to a file that failing tests print.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support import pods

READY_LINE = "agentihooks-swarm started"


class OperatorProcess:
    def __init__(
        self,
        *,
        kubeconfig: Path,
        redis_url: str,
        namespace: str | None,
        log_path: Path,
        namespaces: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        verbose: bool = True,
        via_kopf: bool = False,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.redis_url = redis_url
        self.namespace = namespace
        #: Served instead of ``namespace`` when given: ``run -n A -n B`` and AGENTIHOOKS_SWARM_NAMESPACES.
        self.namespaces = list(namespaces)
        self.log_path = log_path
        self.extra_env = dict(env or {})
        self.verbose = verbose
        #: ``kopf run -m agentihooks_swarm.handlers`` (kopf's CLI hosts the operator) instead of
        #: ``python -m agentihooks_swarm run``.
        self.via_kopf = via_kopf
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_SWARM_")}
        env.update(
            {
                "KUBECONFIG": str(self.kubeconfig),
                "AGENTIHOOKS_SWARM_REDIS_URL": self.redis_url,
                **({"AGENTIHOOKS_SWARM_NAMESPACE": self.namespace} if self.namespace is not None else {}),
                **({"AGENTIHOOKS_SWARM_NAMESPACES": ",".join(self.namespaces)} if self.namespaces else {}),
                "AGENTIHOOKS_SWARM_METRICS_PORT": "0",
                "AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS": "1",
                "AGENTIHOOKS_SWARM_API_TIMEOUT_SECONDS": "3",
                "AGENTIHOOKS_SWARM_LEASE_DURATION_SECONDS": "6",
                # The test workers' kwok annotations (tests/support/pods.py) are a prefixed key
                # the worker policy must allow; everything else of it is the safe default.
                "AGENTIHOOKS_SWARM_WORKER_METADATA_PREFIXES": pods.PREFIX,
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def start(self, *, timeout: float = 30.0) -> None:
        if self.popen is not None and self.popen.poll() is None:
            raise RuntimeError("the operator is already running")
        # None: every namespace, as the chart's watch.allNamespaces runs it.
        scope = ["--namespace", self.namespace] if self.namespace is not None else ["--all-namespaces"]
        if self.namespaces:
            scope = [option for name in self.namespaces for option in ("--namespace", name)]
        args = [sys.executable, "-m", "agentihooks_swarm", "run", *scope]
        if self.via_kopf:
            args = [
                sys.executable,
                "-m",
                "kopf",
                "run",
                "-m",
                "agentihooks_swarm.handlers",
                *scope,
                "--standalone",
            ]
        if self.verbose:
            args.append("--verbose")
        self.starts += 1
        mark = self.log().count(READY_LINE)
        with self.log_path.open("ab") as log:
            log.write(f"\n===== start {self.starts}: {' '.join(args)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, env=self.environment(), start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while self.log().count(READY_LINE) <= mark:
            if self.popen.poll() is not None:
                raise RuntimeError(f"the operator exited with {self.popen.returncode}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the operator did not start within {timeout}s:\n{self.tail()}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the operator and its children: a crash, not a shutdown."""
        if self.popen is None or self.popen.poll() is not None:
            return
        os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self, *, timeout: float = 15.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log().splitlines()[-lines:])
