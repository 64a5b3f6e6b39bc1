"""Apply the operator's CRDs (``manifests/crds/``, the one source) to a control plane."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Final

import yaml

from tests.support.cluster import ClusterError, ControlPlane, condition_true

CRDS: Final = Path(__file__).resolve().parents[2] / "manifests" / "crds"
_API: Final = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def apply(control_plane: ControlPlane, *, timeout: float = 30.0) -> list[str]:
    """Create or update every CRD and wait until each is Established; return their names."""
    names = []
    documents = [d for path in sorted(CRDS.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text())]
    for crd in (d for d in documents if d):
        name = crd["metadata"]["name"]
        status, raw = control_plane.request("GET", f"{_API}/{name}")
        if status == 200:  # A reused cluster: bring the CRD up to date with this checkout.
            crd["metadata"]["resourceVersion"] = json.loads(raw)["metadata"]["resourceVersion"]
            control_plane.request_json("PUT", f"{_API}/{name}", crd)
        else:
            control_plane.request_json("POST", _API, crd)
        names.append(name)
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            found = control_plane.request_json("GET", f"{_API}/{name}")
            if condition_true(found, "Established"):
                break
            if time.monotonic() > deadline:
                raise ClusterError(f"CRD {name} not established: {json.dumps(found.get('status'))}")
            time.sleep(0.1)
    return names
