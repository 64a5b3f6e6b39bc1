"""``python -m tests.bench.controller [--baseline] [--tracemalloc DIR] --namespace NS``: the operator
as ``make bench`` runs it.

The same handlers and the same wiring as ``python -m agentihooks_swarm run --standalone`` (kopf
runs ``agentihooks_swarm.handlers``), started in-process with ``kopf.run`` so that the bench can
hand the operator's start-up a runtime of its own through kopf's ``memo``:

* capture mode passes nothing: the production wiring (``runtime.open_runtime``), capture included;
* ``--baseline`` passes :func:`open_baseline`: the production runtime with a startup capture that
  captures nothing (no log read, no record), so refused Pods get plain UID-pinned deletes.

The baseline lives here, in ``tests/bench``, and nowhere in the operator: no environment variable,
setting or command-line option of the operator can turn its capture off.

``--tracemalloc DIR`` starts :mod:`tracemalloc` before the operator imports anything and writes a
snapshot to ``DIR/snapshot-<n>.tracemalloc`` on each ``SIGUSR2`` (see ``tests.bench.memory``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import signal
import sys
import tracemalloc
from collections.abc import AsyncIterator, Sequence
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


@contextlib.asynccontextmanager
async def open_baseline(*, settings: Any, collector: Any) -> AsyncIterator[tuple[Any, Any]]:
    """The production wiring (``runtime.open_runtime``) with :func:`capture_nothing` as its capture."""
    from agentihooks_swarm import runtime

    async with runtime.open_runtime(settings=settings, collector=collector) as (wired, store):
        yield dataclasses.replace(wired, startup=capture_nothing), store


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

    import kopf

    from agentihooks_swarm import handlers, settings

    settings.Settings.from_env()
    kopf.configure(verbose=False)
    memo = kopf.Memo(open_runtime=open_baseline) if args.baseline else kopf.Memo()
    assert handlers.CONFIG is not None  # Imported for its kopf handlers (the default registry).
    kopf.run(standalone=True, namespaces=[args.namespace], memo=memo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
