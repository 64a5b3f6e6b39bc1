"""Stop a long-running tool (bench, soak, demo) cleanly when it is sent SIGTERM.

Python's default for SIGTERM ends the process at once, without running ``finally`` blocks or
context managers' exits, so a ``kill`` (or a CI runner's timeout) left the tool's redis-server,
control plane and operators running. Raising :class:`SystemExit` instead unwinds the stack the
way Ctrl-C does, and each of them is stopped by the code that started it.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

#: The exit status a shell reports for a process ended by SIGTERM.
EXIT_STATUS = 128 + signal.SIGTERM


def _exit(signum: int, frame: FrameType | None) -> None:
    print(f"{sys.argv[0]}: SIGTERM: stopping what this run started", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_STATUS)


def exit_on_sigterm() -> None:
    """Make SIGTERM unwind the main thread (``finally`` blocks run) instead of ending the process."""
    signal.signal(signal.SIGTERM, _exit)
