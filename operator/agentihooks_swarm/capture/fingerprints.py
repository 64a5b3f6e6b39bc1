"""A refusal's fingerprint: the same failure, whatever Pod and whenever, has the same one. Pure.

When a Swarm's image, Secret or registry breaks, every worker is refused the same way, and each
refusal is one record. The fingerprint groups them: a short hash of what the failure *is* — its
failure class, the container that failed, its exit code and reason (or the reason it waits on) —
and of its last words, the container's last log line with secrets redacted and what varies from
Pod to Pod masked (``text.py``: timestamps, Pod names, and every token that holds a digit: ids,
short hex runs, numbers, addresses). ``fingerprint_text`` is that masked line (or, for a worker that
never ran, the masked reason it waits on), for people.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

from agentihooks_swarm import records, text as text_

#: Hex digits of the fingerprint: 2^48 values, no collision among the 100 a swarm keeps.
LENGTH: Final = 12
#: The longest fingerprint text kept (a line is cut, not hashed whole, beyond it).
TEXT_MAX: Final = 300


def mask(text: str, *, names: Iterable[str] = ()) -> str:
    """``text`` redacted by the default patterns (a secret that varies between Pods would split
    the fingerprint, and the text is shown), then masked (:func:`text.mask`): the given names (the
    Pod's, its execution's), timestamps, and every token that holds a digit; cut to ``TEXT_MAX``."""
    return text_.mask(text_.DEFAULT.redact(text), names=names, limit=TEXT_MAX)


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
