"""A refusal's fingerprint: the same failure, whatever Pod and whenever, has the same one. Pure.

When a Swarm's image, Secret or registry breaks, every worker is refused the same way, and each
refusal is one record. The fingerprint groups them: a short hash of what the failure *is* — its
failure class, the container that failed, its exit code and reason (or the reason it waits on) —
and of its last words, the container's last log line with what varies from Pod to Pod masked
(timestamps, UUIDs, hex ids, numbers, Pod names). ``fingerprint_text`` is that masked line (or, for
a worker that never ran, the masked reason it waits on), for people.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Final

from agentihooks_swarm import records

#: Hex digits of the fingerprint: 2^48 values, no collision among the 100 a swarm keeps.
LENGTH: Final = 12
#: The longest fingerprint text kept (a line is cut, not hashed whole, beyond it).
TEXT_MAX: Final = 300

#: What varies between two Pods failing the same way, most specific first. Each is replaced by a
#: placeholder, so that the masked text stays readable.
_MASKS: Final = (
    # RFC 3339 / ISO 8601 timestamps (the log read's own prefix, and any in the line).
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\b"), "<time>"),
    (re.compile(r"\b\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    (
        re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"),
        "<uuid>",
    ),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    # A run of hex digits with at least one letter and one digit (a digest, a container id).
    (re.compile(r"\b(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{6,}\b"), "<hex>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b"), "<ip>"),
    (re.compile(r"\d+"), "<n>"),
)
_SPACES: Final = re.compile(r"\s+")


def mask(text: str, *, names: Iterable[str] = ()) -> str:
    """``text`` with what varies from Pod to Pod replaced: the given names (the Pod's, its
    execution's), then timestamps, UUIDs, hex ids and numbers; whitespace runs made one space."""
    for name in sorted({n for n in names if n}, key=len, reverse=True):
        text = text.replace(name, "<name>")
    for pattern, placeholder in _MASKS:
        text = pattern.sub(placeholder, text)
    return _SPACES.sub(" ", text).strip()[:TEXT_MAX]


def _failing(capture: records.StartupCapture) -> records.ContainerCapture | None:
    """The container that refused: the first (init containers first) that exited nonzero."""
    return next((c for c in capture.containers if c.terminated.get("exitCode") != 0), None)


def _last_line(container: records.ContainerCapture) -> str:
    for line in reversed((container.log or "").splitlines()):
        if line.strip():
            return line.strip()
    return ""


def describe(
    capture: records.StartupCapture, *, names: Iterable[str] = (), summary: str = ""
) -> tuple[str, str]:
    """``(fingerprint, fingerprint_text)`` of a capture; ``names`` are the Pod's and execution's
    names (masked wherever they appear); ``summary`` says in one line why a Pod with no container
    that exited nonzero is stuck (what it waits on: :func:`diagnostics.summary`)."""
    names = list(names)
    failing = _failing(capture)
    if failing is not None:
        terminated = failing.terminated
        # A container that left no line (it never ran: a kubelet that failed the Pod reports it
        # terminated) is told by what it waited on.
        text = mask(_last_line(failing) or summary, names=names)
        parts = [
            str(capture.failure_class or ""),
            failing.name,
            str(terminated.get("exitCode")),
            str(terminated.get("reason") or ""),
            text,
        ]
    else:  # Nothing exited nonzero: what it waits on, or why the Pod failed.
        text = mask(summary, names=names)
        parts = [str(capture.failure_class or ""), "", "", str(capture.reason or ""), text]
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:LENGTH]
    return digest, text
