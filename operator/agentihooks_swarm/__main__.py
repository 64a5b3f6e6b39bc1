"""``python -m agentihooks_swarm`` (or ``agentihooks-swarm``): run the operator, read records.

* ``run [--namespace NS | --all-namespaces] [--liveness URL] [--verbose] [--log-format F]`` —
  the operator (see :func:`serve`);
* ``worker heartbeat|outcome …`` — the worker's reports (see :mod:`agentihooks_swarm.worker.reports`);
* ``records startup|retained|journal|hand|final SLUG EXECUTION`` — print a stored record, pretty.
  Exits 1 with a sentence when there is none;
* ``records forget SLUG EXECUTION --requested-by WHO [--force]`` — remove an execution's records,
  so that its name can be used by a new Execution (an Execution under a used name is
  ``Invalid``, ``NameInUse``, until then). It refuses while the Execution that owns them (by UID)
  still exists, which it asks the API server (the in-cluster service account, else KUBECONFIG),
  and leaves a Warning Event ``RecordsForgotten`` naming WHO before it removes anything.
  ``--force`` is refused unless ``AGENTIHOOKS_SWARM_ALLOW_FORCE_FORGET`` is true;
* ``records top SLUG`` — the swarm's refusals by fingerprint, the most frequent first;
* ``records release SLUG --namespace NS`` — give a swarm name up, so that a Swarm of that name in
  another namespace may use it (a swarm's records belong to the first namespace that used its
  name). Only once none of its records is left.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import urllib.parse
from collections.abc import Sequence

from agentihooks_swarm import errors, records as records_, settings as settings_, store as store_, text
from agentihooks_swarm.capture import diagnostics
from agentihooks_swarm.kubernetes import api, clients, forgotten as forgotten_

logger = logging.getLogger("agentihooks_swarm")

VIEWS = {
    "startup": (store_.STARTUP_DIAGNOSTICS, None, "launch removal's capture"),
    "retained": (store_.RETAINED, "removed.pods", "final cleanup's retained evidence"),
    "journal": (store_.JOURNAL, "pinned.pods", "final cleanup in progress"),
    "hand": (store_.HANDS, None, "the hand result"),
    "final": (store_.FINALS, None, "the attempt's final record"),
}


def _store_error(e: Exception) -> int:
    print(
        f"Cannot read Redis ({type(e).__name__}: {e}). Check AGENTIHOOKS_SWARM_REDIS_URL "
        "(and REDIS_MODE, REDIS_SENTINELS).",
        file=sys.stderr,
    )
    return 2


def records(*, view: str, slug: str, execution: str, full: bool) -> int:
    hash_name, focus, what = VIEWS[view]
    try:
        store = store_.connect()  # A cluster client reads the slot map here.
        key = store.key(slug, hash_name)
        raw = store.redis.hget(key, execution)
    except Exception as e:  # redis-py's errors, shown as a sentence rather than a traceback.
        return _store_error(e)
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
    # Every view is redacted and printable: a record quotes what a worker printed, secrets and
    # terminal escape sequences included (Redis keeps it so; a terminal need not obey it).
    shown = settings_.Settings.from_env().redactor().redact_tree(document)
    print(text.printable(json.dumps(shown, indent=2, ensure_ascii=False)))
    return 0


#: How long ``records forget`` waits for the API server's answer about the owning Execution.
OWNER_LOOKUP_TIMEOUT_SECONDS = 10.0


async def _owning(owner: records_.Owner, *, execution: str) -> dict[str, object] | None:
    """The Execution named ``execution`` in the owner's namespace if it is the owner (its UID),
    else None. Raises ``ApiError`` or the client's configuration errors when it cannot tell."""
    client = await api.client()
    try:
        executions = clients.build(api=client, timeout=OWNER_LOOKUP_TIMEOUT_SECONDS).executions
        found = await executions.read(namespace=owner.namespace, name=execution)
    finally:
        await client.close()
    if found is None or (found.get("metadata") or {}).get("uid") != owner.uid:
        return None
    return found


def _owner_refusal(*, slug: str, execution: str, store: store_.Store) -> int | None:
    """Why ``forget`` must not remove the records now (printed; the exit status), or None.

    A name's records belong to the Execution that claimed them (``execution-owners``). While it
    exists it is running, being cleaned up, or kept ``Done``: removing its records would let its
    name be claimed again and give its evidence to nobody, so forget waits for it to be deleted.
    An Execution under the same name with another UID (the one ``NameInUse`` holds back) is not
    the owner, and is what forget is for.
    """
    try:
        raw, retained, launched = (
            store.redis.hget(store.key(slug, store_.OWNERS), execution),
            store.redis.hexists(store.key(slug, store_.RETAINED), execution),
            any(store.redis.hexists(store.key(slug, name), execution) for name in store_.RECORDS),
        )
    except Exception as e:  # redis-py's errors, shown as a sentence rather than a traceback.
        return _store_error(e)
    if raw is None and launched and not retained:
        # No claim to ask about, and no retained record: a version without owners wrote these, or
        # a failover lost the claim of an Execution that may still be running. Nothing can tell.
        print(
            f"Execution {execution!r} of swarm {slug!r} has records but no owner claim and no retained "
            "record: an Execution that is still running may own them (a Redis failover can lose a claim). "
            "Check `kubectl get executions -A` for that name; once none is left, pass --force.",
            file=sys.stderr,
        )
        return 1
    if raw is None:
        return None  # Never claimed and finished, or nothing stored: nothing to ask.
    owner = records_.load(records_.Owner, raw)
    where = f"{owner.namespace}/{execution} (uid {owner.uid})"
    try:
        found = asyncio.run(_owning(owner, execution=execution))
    except Exception as e:  # No credentials, a refusal, a timeout: forget cannot tell.
        print(
            f"Cannot tell whether Execution {where}, which owns the records of execution {execution!r} "
            f"of swarm {slug!r}, still exists: {type(e).__name__}: {e}. `records forget` asks the API "
            "server (the in-cluster service account, else KUBECONFIG) for it: run it in the "
            "controller's Pod, or pass --force to remove the records without asking.",
            file=sys.stderr,
        )
        return 2
    if found is None:
        return None
    status = found.get("status")
    phase = status.get("phase") if isinstance(status, dict) else None
    print(
        f"Execution {where} still exists (phase {phase or 'not set yet'}) and owns the records "
        f"of execution {execution!r} of swarm {slug!r}: they are kept. Delete it first (`kubectl delete "
        f"execution -n {owner.namespace} {execution}`: its cleanup finishes, its records stay), then "
        "forget them; or pass --force to remove them anyway (its worker's evidence then has nowhere to go).",
        file=sys.stderr,
    )
    return 1


async def _post_forgotten(forgotten: forgotten_.Forgotten) -> str:
    client = await api.client()
    try:
        made = clients.build(api=client, timeout=OWNER_LOOKUP_TIMEOUT_SECONDS)
        return await forgotten_.leave_event(
            forgotten=forgotten,
            executions=made.executions,
            swarms=made.swarms,
            events=made.events,
            component="agentihooks-swarm",
        )
    finally:
        await client.close()


def _leave_event(*, slug: str, execution: str, requested_by: str, force: bool, store: store_.Store) -> bool:
    """Post the ``RecordsForgotten`` Event (:mod:`.kubernetes.forgotten`) before anything is removed;
    whether it was posted (what went wrong is printed)."""
    try:
        raw = store.redis.hget(store.key(slug, store_.OWNERS), execution)
        namespace = (
            records_.load(records_.Owner, raw).namespace if raw is not None else store.slug_owner(slug=slug)
        )
    except Exception as e:  # redis-py's errors, shown as a sentence rather than a traceback.
        _store_error(e)
        return False
    if namespace is None:
        print(
            f"No namespace owns swarm {slug!r} or execution {execution!r}: there is no object to leave "
            "the RecordsForgotten Event on.",
            file=sys.stderr,
        )
        return False
    forgotten = forgotten_.Forgotten(
        namespace=namespace, slug=slug, execution=execution, requested_by=requested_by, force=force
    )
    try:
        where = asyncio.run(_post_forgotten(forgotten))
    except Exception as e:  # No credentials, a refusal, a timeout: nothing is logged.
        print(
            f"Could not leave the RecordsForgotten Event in namespace {namespace!r}: {type(e).__name__}: "
            f"{e}. `records forget` posts it with the in-cluster service account (else KUBECONFIG): run "
            "it in the controller's Pod.",
            file=sys.stderr,
        )
        return False
    print(f"Event RecordsForgotten left on {where}, requested by {requested_by!r}.")
    return True


def forget(*, slug: str, execution: str, force: bool, requested_by: str) -> int:
    """Remove an execution's records (``records forget``), once an Event says who asked."""
    settings = settings_.Settings.from_env()
    if force and not settings.allow_force_forget:
        print(
            "records forget --force is turned off: it removes records without checking that their "
            f"Execution is gone and their cleanup finished. Set {settings_.PREFIX}ALLOW_FORCE_FORGET=true "
            "on the controller (the chart's records.allowForceForget) to allow it.",
            file=sys.stderr,
        )
        return 1
    try:
        store = store_.connect(settings)
        unfinished = not force and bool(store.redis.hexists(store.key(slug, store_.JOURNAL), execution))
    except Exception as e:  # redis-py's errors, shown as a sentence rather than a traceback.
        return _store_error(e)
    if not force:
        refused = _owner_refusal(slug=slug, execution=execution, store=store)
        if refused is not None:
            return refused
    if unfinished:
        return _unfinished(slug=slug, execution=execution)
    if not _leave_event(slug=slug, execution=execution, requested_by=requested_by, force=force, store=store):
        if not force:
            print("Nothing was removed: records forget removes nothing it cannot log.", file=sys.stderr)
            return 2
        print("Removing them anyway (--force): no Event says so.", file=sys.stderr)
    try:
        removed = store.forget(slug=slug, execution=execution, force=force)
    except Exception as e:  # redis-py's errors, shown as a sentence rather than a traceback.
        return _store_error(e)
    if removed is None:
        return _unfinished(slug=slug, execution=execution)
    print(f"Removed {removed} records of execution {execution!r} of swarm {slug!r}; the name is free.")
    return 0


def _unfinished(*, slug: str, execution: str) -> int:
    print(
        f"Execution {execution!r} of swarm {slug!r} has a cleanup-journal entry: its cleanup has not "
        "finished and its Pods may still exist. Let the operator finish it (`records journal` shows "
        "what it waits for), or pass --force to remove the records anyway.",
        file=sys.stderr,
    )
    return 1


def top(*, slug: str) -> int:
    """The swarm's fingerprints as a table (``records top``)."""
    try:
        store = store_.connect()
        found = store.redis.hgetall(store.key(slug, store_.FINGERPRINTS))
    except Exception as e:  # redis-py's errors, shown as a sentence rather than a traceback.
        return _store_error(e)
    summaries = sorted(
        (records_.load(records_.FingerprintSummary, raw) for raw in found.values()),
        key=lambda s: (-s.count, s.last_seen),
    )
    if not summaries:
        print(f"No refusals counted for swarm {slug!r} (none yet, or another swarm name).", file=sys.stderr)
        return 1
    redactor = settings_.Settings.from_env().redactor()
    rows: list[tuple[str, ...]] = [("COUNT", "FINGERPRINT", "CLASS", "LAST SEEN", "EXAMPLE", "TEXT")]
    rows += [
        tuple(
            text.printable(cell, keep_newlines=False)
            for cell in (
                str(s.count),
                s.fingerprint,
                str(s.failure_class or "unknown"),
                s.last_seen,
                s.example.execution,
                redactor.redact(s.text),
            )
        )
        for s in summaries
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True)]
        print("   ".join([*cells, row[5]]))
    return 0


def release(*, slug: str, namespace: str | None) -> int:
    """Give a swarm name up (``records release``)."""
    try:
        store = store_.connect()
        owner = store.slug_owner(slug=slug)
        if namespace is None or owner != namespace:
            print(
                f"Swarm name {slug!r} is owned by namespace {owner!r}; pass --namespace {owner} to release it"
                if owner is not None
                else f"Swarm name {slug!r} is not owned by any namespace: nothing to release.",
                file=sys.stderr,
            )
            return 1
        store.release(slug=slug, namespace=namespace)
    except errors.SlugHeld as e:
        print(f"Not released: {e}.", file=sys.stderr)
        return 1
    except Exception as e:  # redis-py's errors, shown as a sentence rather than a traceback.
        return _store_error(e)
    print(f"Released swarm name {slug!r} of namespace {namespace!r}: a Swarm of that name may use it.")
    return 0


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentihooks-swarm run", description="Run the operator.")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], help="a namespace to serve")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="serve every namespace")
    parser.add_argument("--liveness", help="serve /healthz and /readyz at this URL's host and port")
    parser.add_argument("--log-format", choices=["plain", "full", "json"], default="full")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("-d", "--debug", action="store_true")
    parser.add_argument("-q", "--quiet", action="store_true")
    # kopf run's options that earlier versions passed: one replica acts by the Lease, never by
    # kopf's peering, so these are accepted and change nothing.
    parser.add_argument("--standalone", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--peering", help=argparse.SUPPRESS)
    return parser


def _scope(args: argparse.Namespace, settings: settings_.Settings) -> tuple[settings_.Settings, list[str]]:
    """The namespaces to serve, and the settings that serve exactly them.

    Without an option, ``AGENTIHOOKS_SWARM_NAMESPACE`` and ``AGENTIHOOKS_SWARM_NAMESPACES``, else
    every namespace. An option wins over them: the operator's own watches and listings serve the
    namespaces kopf serves (a Role in each is then all the operator needs there).
    """
    if args.all_namespaces:
        settings = settings.model_copy(update={"namespace": None, "namespaces": ""})
    elif args.namespace:
        settings = settings.model_copy(update={"namespace": None, "namespaces": ",".join(args.namespace)})
    return settings, list(settings.served_namespaces)


def _probe_address(url: str | None) -> tuple[str, int] | None:
    if not url:
        return None
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or parts.port is None:
        raise settings_.InvalidSettings(f"--liveness {url!r}: give http://HOST:PORT/healthz")
    return parts.hostname or "0.0.0.0", parts.port


async def serve(
    *,
    settings: settings_.Settings,
    namespaces: list[str],
    probes: tuple[str, int] | None,
    capture: diagnostics.Capture = diagnostics.startup,
) -> int:
    """The operator (:func:`serving.running`) with kopf's handlers in a thread of their own, until
    SIGTERM or SIGINT, or until the supervisor gives a task up (then the exit status is 1).

    ``capture``: see :func:`serving.running` (only the bench passes another).
    """
    from agentihooks_swarm import handlers, kopf_adapter, serving, supervisor

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    def give_up(name: str) -> None:
        stop.set()

    async with serving.running(settings=settings, probes=probes, on_give_up=give_up, capture=capture) as now:
        registry = handlers.register(
            kopf_adapter.registry(credentials=api.configuration), running=lambda _: now
        )
        kopf_operator = kopf_adapter.Operator(
            registry=registry, settings=kopf_adapter.settings(), namespaces=namespaces
        )
        now.app.supervisor.start(supervisor.Runnable(name="kopf", run=kopf_operator.run))
        try:
            await stop.wait()
        finally:
            kopf_operator.stop()
    return 1 if now.app.supervisor.given_up else 0


def _run(argv: list[str]) -> int:
    args = _run_parser().parse_args(argv)
    from agentihooks_swarm import kopf_adapter

    kopf_adapter.configure_logging(
        verbose=args.verbose, debug=args.debug, quiet=args.quiet, log_format=args.log_format
    )
    settings, namespaces = _scope(args, settings_.Settings.from_env())
    text.redact_logs(logging.getLogger(), settings.redactor())  # the log quotes workers' text too
    return asyncio.run(serve(settings=settings, namespaces=namespaces, probes=_probe_address(args.liveness)))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except settings_.InvalidSettings as e:
        print(f"agentihooks-swarm: {e}", file=sys.stderr)
        return 2


def _main(argv: list[str]) -> int:
    if argv[:1] == ["run"]:
        return _run(argv[1:])
    if argv[:1] == ["worker"]:
        from agentihooks_swarm.worker import reports as worker

        return worker.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="agentihooks-swarm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="run the operator (see `run --help`)")
    commands.add_parser("worker", help="report heartbeats and the outcome from a worker")
    reader = commands.add_parser("records", help="print a stored record, or forget an execution's records")
    reader.add_argument("view", choices=[*sorted(VIEWS), "forget", "top", "release"])
    reader.add_argument("slug")
    reader.add_argument("execution", nargs="?", help="every view but top and release")
    reader.add_argument("--full", action="store_true", help="the whole record, not only its pods")
    reader.add_argument(
        "--force",
        action="store_true",
        help="forget: even while cleanup is unfinished or the owning Execution exists (not asked)",
    )
    reader.add_argument("--namespace", help="release: the namespace that owns the swarm name")
    reader.add_argument(
        "--requested-by",
        metavar="WHO",
        help="forget (required): who asks, named in the RecordsForgotten Event it leaves",
    )
    args = parser.parse_args(argv)
    if args.view == "release":
        return release(slug=args.slug, namespace=args.namespace)
    if args.view == "top":
        return top(slug=args.slug)
    if args.execution is None:
        parser.error(f"records {args.view} needs SLUG and EXECUTION")
    if args.view == "forget":
        if not (args.requested_by or "").strip():
            parser.error(
                "records forget needs --requested-by WHO: the RecordsForgotten Event it leaves names who "
                'asked (e.g. --requested-by "$(kubectl auth whoami '
                "-o jsonpath='{.status.userInfo.username}')\")"
            )
        return forget(
            slug=args.slug,
            execution=args.execution,
            force=args.force,
            requested_by=args.requested_by.strip()[:200],
        )
    return records(view=args.view, slug=args.slug, execution=args.execution, full=args.full)


if __name__ == "__main__":
    sys.exit(main())
