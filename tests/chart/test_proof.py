"""The chart's startup-refusal proof, both modes, on the local real cluster.

The chart is installed for real; the operator runs outside the cluster as the chart's
ServiceAccount (token from the TokenRequest API), so the chart's RBAC is what is exercised; the
worker's log is planted through kwok, since no real container runs here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import proof_script
from tests.support.cluster import ControlPlane

pytestmark = pytest.mark.integration


# Among the slowest tests: it runs the chart's own proof script as CI and users do (helm install,
# then the operator as a separate Python process with the chart's ServiceAccount, a planted log);
# no-logs also waits for three cleanup passes 2 s apart (two refused, the third removes the Pod).
@pytest.mark.parametrize("mode", ["logs", "no-logs"])
def test_startup_refusal_proof(
    control_plane: ControlPlane, swarm_crds: list[str], redis_url: str, tmp_path: Path, mode: str
) -> None:
    state = tmp_path / "cluster.json"
    control_plane.save(state)
    done, env = proof_script.run(
        control_plane,
        mode=mode,
        operator="external",
        timeout=300,
        REDIS_URL=redis_url,
        PYTHON=sys.executable,
        PROOF_PLANT_LOG=f"{sys.executable} -m tests.support.plant {state}",
        TIMEOUT="90",
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert f"PROOF PASSED ({mode}, operator external)" in done.stdout
    if mode == "logs":
        assert "pods/log for proof-" in done.stdout and ": true" in done.stdout
        assert '"exitCode": 78' in done.stdout
        assert "worker startup refused: planted kind refusal" in done.stdout
    else:
        assert '"log_reads": 3' in done.stdout
        subprocess.run(
            [
                str(control_plane.bin_dir / "kubectl"),
                "delete",
                "namespace",
                env["NAMESPACE"],
                f"{env['NAMESPACE']}-workers",  # the chart's worker namespace, kept by Helm
                "--wait=false",
            ],
            env=env,
            check=False,
            capture_output=True,
        )
