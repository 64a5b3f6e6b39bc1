"""The project's commands as a person runs them, in a child process with a clean environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def records_forget(
    *, slug: str, execution: str, redis_url: str, kubeconfig: Path | None, force: bool = False
) -> subprocess.CompletedProcess[str]:
    """``python -m agentihooks_swarm records forget SLUG EXECUTION [--force]`` against ``redis_url``.

    ``forget`` asks the API server whether the Execution that owns the records still exists: with
    ``kubeconfig`` None it has no credentials at all (no in-cluster account either)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTIHOOKS_SWARM_", "KUBECONFIG"))}
    env["AGENTIHOOKS_SWARM_REDIS_URL"] = redis_url
    env["KUBECONFIG"] = str(kubeconfig) if kubeconfig is not None else "/nonexistent/kubeconfig"
    args = [sys.executable, "-m", "agentihooks_swarm", "records", "forget", slug, execution]
    return subprocess.run(
        [*args, *(["--force"] if force else [])],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def records_release(*, slug: str, namespace: str, redis_url: str) -> subprocess.CompletedProcess[str]:
    """``python -m agentihooks_swarm records release SLUG --namespace NS`` against ``redis_url``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_SWARM_")}
    env["AGENTIHOOKS_SWARM_REDIS_URL"] = redis_url
    args = [sys.executable, "-m", "agentihooks_swarm", "records", "release", slug, "--namespace", namespace]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=False)
