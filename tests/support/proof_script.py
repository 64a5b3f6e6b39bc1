"""The chart's startup-refusal proof (``charts/agentihooks-swarm/ci/startup-refusal-proof.sh``), run
as CI and users run it, against the test cluster: with the operator outside the cluster
(``tests/chart``, kwok) or in it (``tests/realnode``)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

from tests.support.cluster import ControlPlane

REPO = Path(__file__).resolve().parents[2]
PROOF = REPO / "charts" / "agentihooks-swarm" / "ci" / "startup-refusal-proof.sh"


def run(
    cluster: ControlPlane, *, mode: str, operator: str, timeout: float, **variables: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """The proof in ``mode`` (``logs``, ``no-logs``) with the operator ``external`` or
    ``in-cluster``, in a namespace and release of its own, with the script's other ``variables``
    (``TIMEOUT``, ``REDIS_URL``...); its result, and the environment it ran in (``NAMESPACE``)."""
    suffix = uuid.uuid4().hex[:6]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTIHOOKS_SWARM_")},
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": f"{cluster.bin_dir}:{os.environ['PATH']}",
        "MODE": mode,
        "OPERATOR": operator,
        "NAMESPACE": f"proof-{mode}-{suffix}",
        "RELEASE": f"proof-{suffix}",
        **variables,
    }
    done = subprocess.run(
        ["bash", str(PROOF)], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False
    )
    return done, env
