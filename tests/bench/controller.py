"""``python -m tests.bench.controller [--baseline] [--tracemalloc DIR] --namespace NS``: the operator
as ``make bench`` runs it.

The same wiring and code as ``python -m agentihooks_swarm run --namespace NS`` (its ``serve``),
started in-process so that the bench can hand it a startup capture of its own:

* capture mode passes nothing: the production capture (``diagnostics.startup``);
* ``--baseline`` passes :func:`capture_nothing`: refused Pods get plain UID-pinned deletes, with no
  log read and no record.

The baseline lives here, in ``tests/bench``, and nowhere in the operator: no environment variable,
setting or command-line option of the operator can turn its capture off.

``--tracemalloc DIR`` starts :mod:`tracemalloc` before the operator imports anything and writes a
snapshot to ``DIR/snapshot-<n>.tracemalloc`` on each ``SIGUSR2`` (see ``tests.bench.memory``).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

#: Frames kept per allocation when --tracemalloc is on: enough to see past kopf's and our helpers.
TRACE_FRAMES = 16


async def capture_nothing(
    pod: dict[str, Any], client: Any, *, read_logs: bool = True, failed_read: BaseException | None = None
) -> None:
    """The baseline's startup capture: no log read, no capture, so nothing is stored."""
    return None


def _snapshots(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    taken = 0

    def dump(signum: int, frame: FrameType | None) -> None:
        nonlocal taken
        taken += 1
        path = directory / f"snapshot-{taken}.tracemalloc"
        tracemalloc.take_snapshot().dump(str(path))
        path.with_suffix(".done").write_text(str(tracemalloc.get_traced_memory()))

    signal.signal(signal.SIGUSR2, dump)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.controller", description=__doc__)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--baseline", action="store_true", help="capture nothing (the bench's baseline)")
    parser.add_argument("--tracemalloc", type=Path, help="directory for snapshots taken on SIGUSR2")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.tracemalloc is not None:
        tracemalloc.start(TRACE_FRAMES)
        _snapshots(args.tracemalloc)

    from agentihooks_swarm import __main__ as operator, kopf_adapter, settings

    kopf_adapter.configure_logging(verbose=False, debug=False, quiet=False, log_format="full")
    configured = settings.Settings.from_env().model_copy(update={"namespace": args.namespace})
    capture: Any = capture_nothing if args.baseline else None
    extra = {"capture": capture} if capture is not None else {}
    return asyncio.run(operator.serve(settings=configured, namespaces=[args.namespace], probes=None, **extra))


if __name__ == "__main__":
    sys.exit(main())
