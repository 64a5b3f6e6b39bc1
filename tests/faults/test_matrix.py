"""The fault matrix: each deletion path x each step x each fault, on the real API server and the
real Redis, with faults from the proxy (API) or from the real redis-server (stopped, frozen, or
refusing a command by ACL) — never from patching the operator.

Every case plants a refused worker (exit 78, planted log), runs the path with the fault, then lets
final cleanup run to the end without faults, and checks the invariants, counted over the whole
matrix (``tests/faults/ledger.py``; the summary prints at the end of the run):

* no Pod deleted whose capture was not stored first (the refused Pod is gone ⇒ its evidence is in
  Redis, with its exit code);
* no first capture overwritten; no record half-written (every stored record parses);
* every attempt's Pods gone once its cleanup finished, the journal cleared and the retained record
  present (never neither, never both);
* at most ``LOG_READS`` log reads per pinned Pod, and at most one delete per UID reaching the
  API server.

A failing Events read (the capture's ``events``) is a step of both paths too: it degrades the
capture to no ``events`` field (``events_error`` says why) and never keeps a Pod that the spec
would delete, so those rows also check that the Pod was deleted with its capture on the first try.

Pods that were replaced, relabelled, foreign or being deleted by someone else are covered by
``tests/integration/test_launch.py`` and ``tests/integration/test_cleanup.py``; the operator
killed at each checkpoint of a cleanup pass by ``tests/e2e/test_cleanup_flow.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal

import pytest
import redis
from kubernetes_asyncio import client

from agentihooks_swarm import errors, records, settings
from agentihooks_swarm.lifecycle import cleanup, events, launch, model
from agentihooks_swarm.storage import operations
from tests.faults.ledger import LEDGER
from tests.support import pods
from tests.support.cleanup_passes import run_pass
from tests.support.fixtures_rig import Rig
from tests.support.planting import PLANTED, SLUG
from tests.support.proxy import Rule
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

Path_ = Literal["launch", "cleanup"]
# release: the patch that removes the Pod's evidence finalizer after its delete.
API_STEPS = ("pod-read", "log-read", "events-read", "delete", "release")
API_FAULTS = ("403", "404", "409", "429", "500", "503", "timeout", "reset")


@dataclasses.dataclass(frozen=True)
class Case:
    path: Path_
    step: str
    fault: str
    times: int | None = 1

    @property
    def id(self) -> str:
        return f"{self.path}-{self.step}-{self.fault}" + ("-always" if self.times is None else "")


CASES = [
    # A reset comes twice: aiohttp silently resends an idempotent request once after a reset on a
    # reused connection, so a single reset would never reach the operator.
    *(
        Case(path, step, fault, times=2 if fault == "reset" else 1)
        for path in ("launch", "cleanup")
        for step in API_STEPS
        for fault in API_FAULTS
    ),
    Case("cleanup", "log-read", "403", times=None),  # pods/log never readable: degraded after 3 passes
    # events never listable (a Role without `list events`): every capture without events, no Pod kept.
    *(Case(path, "events-read", "403", times=None) for path in ("launch", "cleanup")),
    *(Case(path, "redis", fault) for path in ("launch", "cleanup") for fault in ("unavailable", "slow")),
    Case("launch", "record-write", "refused"),
    Case("cleanup", "journal-pin", "refused"),
    Case("cleanup", "journal-save", "refused"),
    Case("cleanup", "retained-move", "refused"),
]

#: The command each Redis step needs; the ACL takes it away from the operator's user.
REFUSED_COMMAND = {
    "record-write": "hsetnx",
    "journal-pin": "hsetnx",
    "journal-save": "hset",
    "retained-move": "hdel",  # The move's last command: the record is written, the entry stays.
}


@pytest.fixture
async def quick_store(redis_url: str) -> AsyncIterator[operations.AsyncStore]:
    """The operator's store with a 1 s Redis timeout, so a frozen Redis is a quick failure."""
    async with operations.open_store(
        settings.Settings(redis_url=redis_url, redis_timeout_seconds=1)
    ) as opened:
        yield opened


def _api_rule(rig: Rig, *, pod: str, case: Case) -> Rule:
    base = f"/api/v1/namespaces/{rig.namespace}/pods/{pod}"
    method, path = {
        "pod-read": ("GET", base),
        "log-read": ("GET", base + "/log"),
        "events-read": ("GET", f"/api/v1/namespaces/{rig.namespace}/events"),
        "delete": ("DELETE", base),
        "release": ("PATCH", base),
    }[case.step]
    return rig.fault(case.fault, method=method, path=path, times=case.times)


@contextlib.contextmanager
def _redis_fault(server: RedisServer, *, case: Case) -> Iterator[None]:
    admin = redis.Redis.from_url(server.url)

    def acl(rule: str) -> Callable[[], None]:
        return lambda: admin.execute_command("ACL", "SETUSER", "default", rule)  # type: ignore[no-untyped-call]

    begin, end = {
        "unavailable": (server.stop, server.start),
        "slow": (server.freeze, server.thaw),
    }.get(case.fault, (acl(f"-{REFUSED_COMMAND.get(case.step)}"), acl("+@all")))
    try:
        begin()
        yield
    finally:
        end()
        admin.close()


def _forwarded_deletes(rig: Rig, *, pod_path: str, rules: list[Rule], case: Case) -> int:
    sent = rig.proxy.count(method="DELETE", path=pod_path)
    answered = sum(r.hits for r in rules if case.step == "delete")  # Answered by the proxy, not forwarded.
    return sent - answered


@dataclasses.dataclass
class Run:
    """What one case did: the path under its fault, then final cleanup without faults."""

    attempt: model.Attempt
    pod_path: str
    rules: list[Rule] = dataclasses.field(default_factory=list)
    removal: launch.Removal | None = None
    first_record: Any = None
    passes_failed: int = 0
    cleanup_log_reads: int = 0


async def _run(rig: Rig, store: operations.AsyncStore, server: RedisServer, *, case: Case) -> Run:
    attempt = await rig.attempt()
    uid = (await rig.plant(attempt, exit_code=78, reason="Error"))["metadata"]["uid"]
    run = Run(attempt=attempt, pod_path=f"/api/v1/namespaces/{rig.namespace}/pods/{attempt.pod_name}")
    async with rig.runtime(timeout=1.0) as runtime:
        # 1. The path under the fault.
        if case.step in API_STEPS:
            run.rules.append(_api_rule(rig, pod=attempt.pod_name, case=case))
        if case.path == "launch":
            with _redis_fault(server, case=case) if case.step not in API_STEPS else contextlib.nullcontext():
                run.removal = await launch.remove_at_launch(
                    runtime=runtime, attempt=attempt, uid=uid, notify=events.Collected()
                )
            if case.step not in API_STEPS:
                LEDGER.faults += 1
            for rule in run.rules:
                rig.proxy.remove_rule(rule)
            run.first_record = await store.redis.hget(
                store.key(SLUG, "attempt-startup-diagnostics"), attempt.execution
            )
        else:
            run.passes_failed += await _cleanup_until_done(runtime, store, attempt, case=case, server=server)
        LEDGER.faults += sum(r.hits for r in run.rules)

        # 2. Final cleanup, without faults, to the end (launch removal may have kept the Pod).
        rig.proxy.clear_rules()
        log_reads_before = rig.proxy.count(path=run.pod_path + "/log")
        if case.path == "launch":
            await _cleanup_until_done(runtime, store, attempt, case=None, server=server)
        run.cleanup_log_reads = rig.proxy.count(path=run.pod_path + "/log") - (
            log_reads_before if case.path == "launch" else 0
        )
    return run


async def _invariants(
    rig: Rig, store: operations.AsyncStore, run: Run, *, case: Case
) -> tuple[records.Retained | None, records.StartupRecord | None]:
    """3. The invariants, counted in the ledger; the retained record and launch capture as stored."""
    where, execution = case.id, run.attempt.execution
    journal = await store.redis.hget(store.key(SLUG, "cleanup-journal"), execution)
    retained_raw = await store.redis.hget(store.key(SLUG, "attempt-retained"), execution)
    launch_raw = await store.redis.hget(store.key(SLUG, "attempt-startup-diagnostics"), execution)
    LEDGER.check(
        "journal cleared and retained present",
        journal is None and retained_raw is not None,
        case=where,
        detail=f"journal={journal is not None} retained={retained_raw is not None}",
    )
    parsed_ok = True
    try:
        retained = records.load(records.Retained, retained_raw or "")
        launch_record = records.load(records.StartupRecord, launch_raw) if launch_raw else None
    except Exception as e:
        parsed_ok, retained, launch_record = False, None, None
        LEDGER.check("records parse (none half-written)", False, case=where, detail=str(e))
    if parsed_ok:
        LEDGER.check("records parse (none half-written)", True, case=where)
    gone = not await _exists(rig.api, rig.namespace, run.attempt.pod_name)
    LEDGER.check("pods gone once cleanup finished", gone, case=where)
    evidence = False
    if launch_record is not None:
        evidence = launch_record.startup.containers[0].terminated.get("exitCode") == 78
    if retained is not None:
        for entry in retained.removed.pods:
            if entry.startup is not None and entry.startup.containers[0].terminated.get("exitCode") == 78:
                evidence = True
    LEDGER.check("no refused pod deleted without its capture stored", not gone or evidence, case=where)
    if run.first_record is not None:
        LEDGER.check("first capture never overwritten", launch_raw == run.first_record, case=where)
    LEDGER.check(
        f"at most {cleanup.LOG_READS} log reads per pinned pod (cleanup)",
        run.cleanup_log_reads <= cleanup.LOG_READS,
        case=where,
        detail=f"{run.cleanup_log_reads}",
    )
    forwarded = _forwarded_deletes(rig, pod_path=run.pod_path, rules=run.rules, case=case)
    LEDGER.check(
        "at most one delete per UID reaches the API server",
        forwarded <= 1,
        case=where,
        detail=f"{forwarded}",
    )
    return retained, launch_record


def _check_spec(
    run: Run, *, case: Case, retained: records.Retained | None, launch_record: records.StartupRecord | None
) -> None:
    """4. The spec's behaviour for this case."""
    where, removal = case.id, run.removal
    if case.step == "events-read":
        stored = launch_record.startup if launch_record is not None else None
        if retained is not None and retained.removed.pods and retained.removed.pods[0].startup is not None:
            stored = stored or retained.removed.pods[0].startup
        LEDGER.check(
            "a failed Events read keeps no Pod and degrades to no events field",
            (removal is None or removal.removed)
            and run.passes_failed == 0
            and stored is not None
            and stored.events is None
            and stored.events_error is not None
            and (stored.containers[0].log or "").endswith(PLANTED.decode()),
            case=where,
            detail=f"removal={removal} passes_failed={run.passes_failed} stored={stored}",
        )
    if case.path == "launch":
        assert removal is not None
        # A 404 on the re-read counts as removed (the spec); one on the delete is checked by a list.
        # A 409 on the delete says the Pod changed since it was judged: it is read, judged (its
        # stored capture kept) and deleted again.
        # A 409 on the release: its finalizers moved (read again, released). A 404 there is believed
        # only when a list agrees; here the list still shows it, so it stays for cleanup.
        expected_removed = (
            (case.fault == "404" and case.step == "pod-read")
            or case.step == "events-read"
            or (case.fault == "409" and case.step == "delete")
            or (case.fault == "409" and case.step == "release")
        )
        assert removal.removed is expected_removed, (where, removal)
        if (
            case.step in ("pod-read", "log-read")
            or case.step == "record-write"
            or case.fault in ("unavailable", "slow")
        ):
            assert run.first_record is None, where  # Nothing stored when the capture could not be.
    else:
        assert retained is not None
        [entry] = retained.removed.pods
        if case.step == "log-read" and case.times is None:
            assert entry.log_reads == cleanup.LOG_READS and entry.startup is not None
            assert entry.startup.containers[0].log is None
        elif case.step == "log-read":
            # A refusal counts at once; a failure that may pass (429, 5xx, a timeout, a reset) only
            # once it has lasted 10 s, so one failed pass costs nothing.
            assert entry.log_reads == (1 if case.fault in ("403", "404", "409") else None), (where, entry)
            assert entry.startup is not None
            assert (entry.startup.containers[0].log or "").endswith(PLANTED.decode())


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_fault(
    rig: Rig, quick_store: operations.AsyncStore, redis_server: RedisServer, case: Case
) -> None:
    LEDGER.cases += 1
    run = await _run(rig, quick_store, redis_server, case=case)
    retained, launch_record = await _invariants(rig, quick_store, run, case=case)
    _check_spec(run, case=case, retained=retained, launch_record=launch_record)
    assert not [v for v in LEDGER.violations if v.startswith(case.id + ":")], LEDGER.violations


async def _cleanup_until_done(
    runtime: model.Runtime,
    store: operations.AsyncStore,
    attempt: model.Attempt,
    *,
    case: Case | None,
    server: RedisServer,
) -> int:
    failures = 0
    for number in range(8):
        fault = case is not None and case.step not in API_STEPS and number == 0
        try:
            with _redis_fault(server, case=case) if fault and case is not None else contextlib.nullcontext():
                if fault:
                    LEDGER.faults += 1
                await run_pass(runtime, store, attempt)
            return failures
        except (cleanup.PassFailed, errors.ApiError, errors.StoreUnavailable):
            failures += 1
    raise AssertionError(f"cleanup of {attempt.execution} did not finish in 8 passes")


async def _exists(api: client.ApiClient, namespace: str, name: str) -> bool:
    core = client.CoreV1Api(api)
    with contextlib.suppress(TimeoutError):
        await pods.wait_for_absent(
            read=lambda: core.read_namespaced_pod(name, namespace), what=name, timeout=10
        )
        return False
    return True
