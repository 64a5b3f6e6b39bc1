"""The real node's default StorageClass ``standard``: a host-path provisioner, as kind has one.

A PersistentVolumeClaim of class ``standard`` (the default class, so also one that names none)
gets a ``hostPath`` PersistentVolume in a directory under the node's work directory, pre-bound to
the claim; a released volume is deleted with its directory (reclaim policy ``Delete``). The
directory is world-writable, as kind's local-path volumes are, so a container running as any
user (the chart's Redis runs as 999) can write to it.

It runs as a child process of the cluster (``python -m tests.support.cluster.provisioner
KUBECONFIG-STATE ROOT``), polling the API server twice a second: the handful of claims a test
makes needs no watch.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Final

from tests.support.cluster.control_plane import ControlPlane

CLASS: Final = "standard"
PROVISIONER: Final = "agentihooks.io/host-path"
_POLL_SECONDS: Final = 0.5


def storage_class() -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }


def volume_for(claim: dict[str, Any], *, root: Path) -> dict[str, Any]:
    """The PersistentVolume that serves ``claim``: a directory under ``root``, bound to it."""
    metadata = claim["metadata"]
    name = f"pvc-{metadata['uid']}"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
            "accessModes": claim["spec"].get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": CLASS,
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": metadata["namespace"],
                "name": metadata["name"],
                "uid": metadata["uid"],
            },
            "hostPath": {"path": str(root / name), "type": "DirectoryOrCreate"},
        },
    }


def reconcile(plane: ControlPlane, *, root: Path) -> None:
    """One pass: a volume for each unserved claim of our class, and released volumes deleted."""
    claims = plane.request_json("GET", "/api/v1/persistentvolumeclaims").get("items") or []
    volumes = plane.request_json("GET", "/api/v1/persistentvolumes").get("items") or []
    served = {v["spec"].get("claimRef", {}).get("uid") for v in volumes}
    for claim in claims:
        spec = claim.get("spec") or {}
        if spec.get("storageClassName") != CLASS or spec.get("volumeName"):
            continue
        if claim["metadata"]["uid"] in served or claim["metadata"].get("deletionTimestamp"):
            continue
        volume = volume_for(claim, root=root)
        directory = Path(volume["spec"]["hostPath"]["path"])
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o777)
        plane.request_json("POST", "/api/v1/persistentvolumes", volume, ok=(201, 409))
    for volume in volumes:
        ours = volume["metadata"].get("annotations", {}).get("pv.kubernetes.io/provisioned-by") == PROVISIONER
        if ours and volume.get("status", {}).get("phase") in ("Released", "Failed"):
            shutil.rmtree(volume["spec"]["hostPath"]["path"], ignore_errors=True)
            plane.request("DELETE", f"/api/v1/persistentvolumes/{volume['metadata']['name']}")


def main(argv: list[str]) -> int:
    state, root = Path(argv[0]), Path(argv[1])
    plane = ControlPlane.load(state)
    plane.request_json("POST", "/apis/storage.k8s.io/v1/storageclasses", storage_class(), ok=(201, 409))
    print(f"provisioner: StorageClass {CLASS} (default), volumes under {root}", flush=True)
    while True:
        try:
            reconcile(plane, root=root)
        except (OSError, json.JSONDecodeError, RuntimeError) as error:  # the API server restarting
            print(f"provisioner: {error}", flush=True)
        time.sleep(_POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
