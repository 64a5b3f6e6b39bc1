"""Who deleted a Pod: the API server's audit log of Pod deletes (the test control plane writes one,
see ``tests/support/cluster/control_plane.py``), read at the end of a soak for rule 4's findings."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

#: The most recent deletes of one name a finding lists.
SHOWN = 6


def pod_deletes(path: Path) -> dict[str, list[str]]:
    """Per Pod name (the soak's Pods share one namespace), its deletes in order, each as
    ``"<agent> <code> at <time>"``. The agent is the client's user agent up to its version
    (``kwok``, ``kube-controller-manager``, ``OpenAPI-Generator``: the operator's client). Empty
    when there is no log."""
    found: dict[str, list[str]] = defaultdict(list)
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # A line cut short by the API server's stop.
        ref = event.get("objectRef") or {}
        if event.get("verb") != "delete" or ref.get("resource") != "pods" or not ref.get("name"):
            continue
        agent = str(event.get("userAgent") or "?").split("/", 1)[0]
        code = (event.get("responseStatus") or {}).get("code", "?")
        at = str(event.get("requestReceivedTimestamp") or "")[11:23]
        found[str(ref["name"])].append(f"{agent} {code} at {at}")
    return dict(found)


def describe(deletes: list[str]) -> str:
    """The last :data:`SHOWN` deletes, for a finding."""
    if not deletes:
        return ""
    shown = deletes[-SHOWN:]
    more = f"{len(deletes) - len(shown)} earlier, then " if len(deletes) > len(shown) else ""
    return f"; deletes of its name (audit log): {more}{', '.join(shown)}"
