"""``python -m tests.support.plant STATE NAMESPACE POD CONTAINER < log`` — plant a container log.

The proof script's hook on the local kwok cluster (``PROOF_PLANT_LOG``): kwok has no real
container to print the refusal, so the log the worker would have printed is planted through
kwok's Logs mechanism. On kind the hook is unset and the real container prints it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.cluster import ControlPlane
from tests.support.pods import plant_log_blocking


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    state, namespace, pod, container = argv
    cluster = ControlPlane.load(Path(state))
    plant_log_blocking(
        cluster=cluster, namespace=namespace, pod=pod, container=container, content=sys.stdin.buffer.read()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
