"""``python -m agentihooks_swarm`` (or ``agentihooks-swarm``): run the operator, read records.

* ``run [kopf run options]`` — the operator; the same as ``kopf run -m agentihooks_swarm.handlers``.
* ``worker heartbeat|outcome …`` — the worker's reports (see :mod:`agentihooks_swarm.worker`).
* ``records startup|retained|journal|hand|final SLUG EXECUTION`` — print a stored record, pretty.
  Exits 1 with a sentence when there is none.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from agentihooks_swarm import settings as settings_, store as store_

VIEWS = {
    "startup": (store_.STARTUP_DIAGNOSTICS, None, "launch removal's capture"),
    "retained": (store_.RETAINED, "removed.pods", "final cleanup's retained evidence"),
    "journal": (store_.JOURNAL, "pinned.pods", "final cleanup in progress"),
    "hand": (store_.HANDS, None, "the hand result"),
    "final": (store_.FINALS, None, "the attempt's final record"),
}


def records(*, view: str, slug: str, execution: str, full: bool) -> int:
    hash_name, focus, what = VIEWS[view]
    try:
        store = store_.connect()  # A cluster client reads the slot map here.
        key = store.key(slug, hash_name)
        raw = store.redis.hget(key, execution)
    except Exception as e:  # redis-py's errors, shown as a sentence rather than a traceback.
        print(
            f"Cannot read Redis ({type(e).__name__}: {e}). Check AGENTIHOOKS_SWARM_REDIS_URL "
            "(and REDIS_MODE, REDIS_SENTINELS).",
            file=sys.stderr,
        )
        return 2
    if raw is None:
        hint = {
            "startup": "the Pod was not refused, cleanup removed it instead, or it was gone before "
            "launch removal read it; try `records retained`",
            "journal": "cleanup has not started or has finished; try `records retained`",
        }.get(view, "nothing was stored for it")
        print(f"No {what} for execution {execution!r} of swarm {slug!r} in {key}: {hint}.", file=sys.stderr)
        return 1
    document = json.loads(str(raw))
    if focus and not full:
        for part in focus.split("."):
            document = document.get(part, {}) if isinstance(document, dict) else {}
    print(json.dumps(document, indent=2, ensure_ascii=False))
    return 0


def _scope(args: list[str]) -> list[str]:
    """Without a namespace option, serve AGENTIHOOKS_SWARM_NAMESPACE, or every namespace.

    With one ``--namespace`` and no AGENTIHOOKS_SWARM_NAMESPACE, that namespace becomes the
    setting too: the operator's own watch of Done Executions serves the namespace kopf serves.
    """
    given = {"-n", "--namespace", "-A", "--all-namespaces"}
    if any(a in given or a.split("=", 1)[0] in given for a in args):
        named = _namespaces(args)
        if len(named) == 1 and not settings_.Settings.from_env().namespace and "*" not in named[0]:
            os.environ["AGENTIHOOKS_SWARM_NAMESPACE"] = named[0]
        return args
    namespace = settings_.Settings.from_env().namespace
    return [*args, f"--namespace={namespace}"] if namespace else [*args, "--all-namespaces"]


def _namespaces(args: list[str]) -> list[str]:
    found = []
    for index, arg in enumerate(args):
        if arg in ("-n", "--namespace") and index + 1 < len(args):
            found.append(args[index + 1])
        elif arg.startswith("--namespace="):
            found.append(arg.split("=", 1)[1])
    return found


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except settings_.InvalidSettings as e:
        print(f"agentihooks-swarm: {e}", file=sys.stderr)
        return 2


def _main(argv: list[str]) -> int:
    if argv[:1] == ["run"]:
        settings_.Settings.from_env()  # Fail here, in one line, rather than inside kopf.
        from kopf import cli  # The operator's own CLI; imported late so `records` stays light.

        return int(
            cli.main(["run", "-m", "agentihooks_swarm.handlers", *_scope(argv[1:])], standalone_mode=False)
            or 0
        )
    if argv[:1] == ["worker"]:
        from agentihooks_swarm import worker

        return worker.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="agentihooks-swarm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="run the operator (kopf run options follow)")
    commands.add_parser("worker", help="report heartbeats and the outcome from a worker")
    reader = commands.add_parser("records", help="print a stored record")
    reader.add_argument("view", choices=sorted(VIEWS))
    reader.add_argument("slug")
    reader.add_argument("execution")
    reader.add_argument("--full", action="store_true", help="the whole record, not only its pods")
    args = parser.parse_args(argv)
    return records(view=args.view, slug=args.slug, execution=args.execution, full=args.full)


if __name__ == "__main__":
    sys.exit(main())
