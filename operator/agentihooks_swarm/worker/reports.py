"""The worker's half: report heartbeats (with the archive watermark) and the outcome.

A worker, or a sidecar next to it, calls these so the controller knows how far the transcript is
archived and how the attempt ended. Final cleanup waits until the archived watermark reaches the
transcript end recorded when the attempt became final (or until the archive deadline).

From Python::

    from agentihooks_swarm.worker import reports
    s = reports.connect()                    # the worker's credential (docs/workers.md)
    reports.heartbeat(store=s, slug="demo", execution="e1", generation=1, transcript=4096, archived=4096)
    reports.outcome(store=s, slug="demo", execution="e1", generation=1, success=True, summary="done")

:func:`connect` authenticates as the swarm's worker user when the Pod has its credential (the
operator mounts it, :mod:`.credential`): that user may write this swarm's heartbeats and outcomes
and nothing else. Without one it connects as before, from ``AGENTIHOOKS_SWARM_REDIS_*``.

From a shell (inside a worker Pod the slug, execution and generation come from the
``AGENTIHOOKS_SWARM_SLUG``/``_EXECUTION``/``_GENERATION`` variables the controller sets)::

    python -m agentihooks_swarm worker heartbeat --transcript 4096 --archived 4096
    python -m agentihooks_swarm worker outcome --success --summary "done"
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence

import redis.exceptions

from agentihooks_swarm import errors, records, store as store_
from agentihooks_swarm.lifecycle import finals
from agentihooks_swarm.worker import credential as credential_

#: Keeps the newest report, but never lets the transcript or archive watermark go backwards.
_HEARTBEAT = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local new = cjson.decode(ARGV[2])
if old then
  local previous = cjson.decode(old)
  if (previous.transcript or 0) > new.transcript then new.transcript = previous.transcript end
  if (previous.archived or 0) > new.archived then new.archived = previous.archived end
end
local encoded = cjson.encode(new)
redis.call('HSET', KEYS[1], ARGV[1], encoded)
return encoded
"""


def connect(variables: Mapping[str, str] | None = None) -> store_.Store:
    """The store a worker reports to: as its swarm's worker user when it has the credential
    (read again on every call: a rotated password is picked up), else as it always did."""
    found = credential_.load(variables)
    if found is None:
        return store_.connect()
    return store_.Store(client=credential_.client(found), prefix=found.prefix)


def heartbeat(
    *, store: store_.Store, slug: str, execution: str, generation: int, transcript: int, archived: int
) -> records.Heartbeat:
    """Report how much transcript exists and how much is archived; returns the stored heartbeat."""
    report = records.Heartbeat(
        execution=execution,
        generation=generation,
        transcript=transcript,
        archived=min(archived, transcript) if transcript else archived,
        at=finals.timestamp(finals.now()),
    )
    stored = store.redis.eval(
        _HEARTBEAT, 1, store.key(slug, store_.HEARTBEATS), execution, records.dump(report)
    )
    return records.load(records.Heartbeat, str(stored))


def outcome(
    *, store: store_.Store, slug: str, execution: str, generation: int, success: bool, summary: str = ""
) -> bool:
    """Report the attempt's outcome once (the first report wins). True if this one was stored."""
    report = records.Outcome(
        execution=execution,
        generation=generation,
        success=success,
        summary=summary,
        at=finals.timestamp(finals.now()),
    )
    return bool(store.redis.hsetnx(store.key(slug, store_.OUTCOMES), execution, records.dump(report)))


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="agentihooks-swarm worker", description="Report from a worker.")
    parser.add_argument("--slug", default=os.environ.get("AGENTIHOOKS_SWARM_SLUG"))
    parser.add_argument("--execution", default=os.environ.get("AGENTIHOOKS_SWARM_EXECUTION"))
    parser.add_argument(
        "--generation", type=int, default=int(os.environ.get("AGENTIHOOKS_SWARM_GENERATION") or 1)
    )
    commands = parser.add_subparsers(dest="command", required=True)
    beat = commands.add_parser("heartbeat", help="report the transcript size and the archive watermark")
    beat.add_argument("--transcript", type=int, required=True)
    beat.add_argument("--archived", type=int, required=True)
    done = commands.add_parser("outcome", help="report how the attempt ended (first report wins)")
    result = done.add_mutually_exclusive_group(required=True)
    result.add_argument("--success", action="store_true")
    result.add_argument("--failure", action="store_true")
    done.add_argument("--summary", default="")
    args = parser.parse_args(list(argv))
    if not args.slug or not args.execution:
        parser.error("--slug and --execution are required outside a worker Pod")
    try:
        return _report(args, store=connect())
    except errors.InvalidCredential as e:
        print(e, file=sys.stderr)
        return 2
    except redis.exceptions.RedisError as e:
        # A NOPERM names what the worker's user may not do: a report for another swarm, say.
        print(f"Redis did not take the report: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def _report(args: argparse.Namespace, *, store: store_.Store) -> int:
    if args.command == "heartbeat":
        stored = heartbeat(
            store=store,
            slug=args.slug,
            execution=args.execution,
            generation=args.generation,
            transcript=args.transcript,
            archived=args.archived,
        )
        print(records.dump(stored))
        return 0
    written = outcome(
        store=store,
        slug=args.slug,
        execution=args.execution,
        generation=args.generation,
        success=args.success,
        summary=args.summary,
    )
    print("outcome stored" if written else "an earlier outcome is kept")
    return 0
