"""The project's commands as a person runs them, in a child process with a clean environment."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def records_forget(
    *,
    slug: str,
    execution: str,
    redis_url: str,
    kubeconfig: Path | None,
    force: bool = False,
    allow_force: bool | None = None,
    requested_by: str = "tests",
) -> subprocess.CompletedProcess[str]:
    """``python -m agentihooks_swarm records forget SLUG EXECUTION --requested-by WHO [--force]``
    against ``redis_url``.

    ``forget`` asks the API server whether the Execution that owns the records still exists, and
    posts its Event there: with ``kubeconfig`` None it has no credentials at all (no in-cluster
    account either). ``allow_force`` (by default: ``force``) sets ALLOW_FORCE_FORGET."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTIHOOKS_SWARM_", "KUBECONFIG"))}
    env["AGENTIHOOKS_SWARM_REDIS_URL"] = redis_url
    env["AGENTIHOOKS_SWARM_ALLOW_FORCE_FORGET"] = str(force if allow_force is None else allow_force).lower()
    env["KUBECONFIG"] = str(kubeconfig) if kubeconfig is not None else "/nonexistent/kubeconfig"
    args = [sys.executable, "-m", "agentihooks_swarm", "records", "forget", slug, execution]
    args += ["--requested-by", requested_by]
    return subprocess.run(
        [*args, *(["--force"] if force else [])],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


async def records_forget_in_thread(**options: Any) -> subprocess.CompletedProcess[str]:
    """:func:`records_forget` (same keyword arguments) in a thread, so that the test's event loop
    goes on serving while the command runs (a fault proxy the command's kubeconfig names runs in
    that loop)."""
    return await asyncio.to_thread(functools.partial(records_forget, **options))


def records_release(*, slug: str, namespace: str, redis_url: str) -> subprocess.CompletedProcess[str]:
    """``python -m agentihooks_swarm records release SLUG --namespace NS`` against ``redis_url``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_SWARM_")}
    env["AGENTIHOOKS_SWARM_REDIS_URL"] = redis_url
    args = [sys.executable, "-m", "agentihooks_swarm", "records", "release", slug, "--namespace", namespace]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=False)


def records_view(
    *args: str, redis_url: str, username: str | None = None, password: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m agentihooks_swarm records ARGS…`` against ``redis_url``, as ``username`` when given
    (the records reader's environment: REDIS_USERNAME and REDIS_PASSWORD)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTIHOOKS_SWARM_", "KUBECONFIG"))}
    env["AGENTIHOOKS_SWARM_REDIS_URL"] = redis_url
    env["KUBECONFIG"] = "/nonexistent/kubeconfig"
    if username is not None:
        env["AGENTIHOOKS_SWARM_REDIS_USERNAME"] = username
    if password is not None:
        env["AGENTIHOOKS_SWARM_REDIS_PASSWORD"] = password
    command = [sys.executable, "-m", "agentihooks_swarm", "records", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)
