"""The eight checks, as pure functions: histories and records in, findings and counts out.

1. Every refused Pod that is gone has a capture carrying its own UID (refused by its status up
   to its delete: a Pod the delete stopped is not a refused Pod deleted), stored under its own
   execution, and its own marker when a container of it ran (a degraded capture, with exit
   reasons and no ``log`` field, is the spec's answer to three failed log reads); never another
   Pod's. At most one capture per UID in each record. A launch capture next to a retained one is
   the spec's "launch removal kept the Pod, cleanup captured it" and is counted, not judged.
2. No capture for a Pod that was not refused (at any time: a Pod that failed only once deleted
   may be captured by a pass that reads it then, which is not wrong).
3. Every refused Pod had its capture in Redis when the checker saw it let go: deleted, and not
   held by the evidence finalizer (:class:`~.model.Probe`, made at once): no Pod may go before a
   durable record, whoever deleted it. A probe that
   found nothing in a Redis that lost acknowledged writes after the Pod was refused (a
   :class:`~.model.Loss` between the refusal and the read: the capture may have been
   acknowledged by a primary alone that then lost it) cannot tell; rule 1 judges what was put
   back.
4. No worker Pod and no ``cleanup-journal`` entry is left at the end. A Pod deleted but still
   held (Terminating) by the operator's evidence finalizer is left: its evidence was never taken
   and released, and nothing else removes it (the soak's own planted Pod of an Execution deleted
   before the operator took it on could not be checked: see :func:`judge_leftovers`).
5. Every Execution converged (Done, Invalid or Blocked), and every Execution being deleted was
   gone, within ``bound`` seconds of the faults stopping.
6. Each operator process stayed under ``rss_bound_mib`` (VmHWM), exited only when the soak ended
   it, and every background task was up at its last scrape (``agentihooks_swarm_task_up``).
7. A name's records belong to the Execution that owns the name (its UID in ``execution-owners``):
   no record under a name holds a Pod of another Execution; a life whose records the user forgot
   (``records forget``) stays forgotten (none of its Pods' captures, nor its owner claim, is back
   at the end); and each record an operator logged it put back after a failover is, at the end,
   the owner's and never a forgotten life's.
8. An Execution is ``Done`` only once its worker Pods are gone or going: no worker Pod of the
   attempt it finished is still there (not being deleted) ``DONE_SLACK`` seconds after the checker
   saw it ``Done``, and none is created after.

Which Execution a Pod belongs to (:func:`attribute`): the one the soak planted it for, else the
one its controller reference names (by UID: the operator's own Pod of a refused-adopted Execution
whose create came before the soak's), else the newest Execution of its name the checker had seen
when it first saw the Pod (a name is used again only once its earlier Execution and Pod are gone).
A refused Pod of a forgotten life is judged by rule 1 against what Redis held just before the
forget (the user removed the rest).

"could not check" (``unchecked``) is kept apart from ``violated``: a Pod deleted while the
checker's watch was broken and last seen not refused, a capture of a Pod it never saw, a probe
that found Redis unreachable, a log without any marker (kwok served no planted log), a metric
that does not exist, records under a name with no owner claim, a record logged as put back that
is not in Redis at the end.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from tests.soak.checker import audit
from tests.soak.checker.model import (
    EVIDENCE_FINALIZER,
    Capture,
    ExecutionHistory,
    Finding,
    Forgotten,
    Loss,
    OperatorLife,
    PodHistory,
    Restore,
    ran,
)

#: Rule 8: how long after the checker saw an Execution ``Done`` its worker's delete may be seen (the
#: Pods and the Executions come in two watches; the delete happens first).
DONE_SLACK = 10.0
#: Which stored record a restore of each kind writes (a journal entry may be retained since); an
#: owner claim holds no capture: only whose life it is counts.
RESTORED_IN: Final[Mapping[str, tuple[str, ...]]] = {
    "startup": ("launch",),
    "journal": ("journal", "retained"),
    "retained": ("retained",),
    "owner": (),
}


@dataclass
class Verdicts:
    findings: list[Finding] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    """What was checked and how it came out (``refused pods``, ``captures verified`` …)."""

    def violated(self, rule: int, subject: str, detail: str) -> None:
        self.findings.append(Finding(rule=rule, verdict="violated", subject=subject, detail=detail))

    def unchecked(self, rule: int, subject: str, detail: str) -> None:
        self.findings.append(Finding(rule=rule, verdict="unchecked", subject=subject, detail=detail))

    def of(self, rule: int, verdict: str = "violated") -> list[Finding]:
        return [f for f in self.findings if f.rule == rule and f.verdict == verdict]

    @property
    def violations(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict == "violated"]

    def extend(self, other: Verdicts) -> None:
        self.findings += other.findings
        self.counts.update(other.counts)


def _pod(pod: PodHistory) -> str:
    return f"pod {pod.name} (uid {pod.uid}, execution {pod.slug}/{pod.execution})"


def judge_captures(
    pods: Mapping[str, PodHistory],
    captures: Sequence[Capture],
    *,
    redis_read: bool = True,
    executions: Mapping[str, ExecutionHistory] | None = None,
    forgotten: Mapping[str, Forgotten] | None = None,
    losses: Sequence[Loss] = (),
) -> Verdicts:
    """Rules 1 and 2 (see the module docstring); ``redis_read=False``: the end reads failed.
    ``executions`` only adds to a finding that its Pod's name was used again. ``forgotten``
    (:func:`forgotten_lives`): Pods whose records the user forgot, judged by rule 1 against what
    Redis held just before the forget (``losses``: see :func:`judge_deletes`)."""
    verdicts = Verdicts()
    reused = _reused_names(executions or {})
    forgotten = forgotten or {}
    by_uid: dict[str, list[Capture]] = defaultdict(list)
    for capture in captures:
        if capture.startup is not None:
            by_uid[capture.uid].append(capture)
    for pod in pods.values():
        if pod.refused_after_delete:
            verdicts.counts["pods that failed only once deleted (stopped by the delete)"] += 1
        if not pod.gone:
            continue  # Left over: rule 4's.
        if not pod.refused:
            if not pod.final_known:
                verdicts.unchecked(
                    1, _pod(pod), "deleted while the checker's watch was broken, last seen not refused"
                )
            continue
        verdicts.counts["refused pods gone"] += 1
        forget = forgotten.get(pod.uid)
        if forget is not None:
            verdicts.counts["refused pods of forgotten lives (judged just before the forget)"] += 1
            if forget.before is None:
                verdicts.unchecked(
                    1, _pod(pod), "its records were forgotten, and Redis could not be read just before"
                )
                continue
            before = [c for c in forget.before if c.uid == pod.uid and c.startup is not None]
            since = pod.refused_at if pod.refused_at is not None else pod.first_seen
            lost = _lost_between(losses, since, forget.read_at)
            if not before and lost is not None:
                verdicts.unchecked(
                    1,
                    _pod(pod),
                    "its records were forgotten, and the read just before the forget found no "
                    f"capture, but Redis may have lost acknowledged writes between its refusal and "
                    f"that read ({_loss(lost, since)})",
                )
                continue
            _judge_refused(verdicts, pod, before, reused=reused, when=" just before the forget")
            continue
        if not redis_read:
            verdicts.unchecked(1, _pod(pod), "Redis could not be read at the end")
            continue
        _judge_refused(verdicts, pod, by_uid.get(pod.uid, []), reused=reused)
    for uid, found in by_uid.items():
        seen = pods.get(uid)
        stores = ", ".join(f"{c.where} {c.slug}/{c.execution}" for c in found)
        if seen is None:
            verdicts.unchecked(2, f"uid {uid}", f"a capture ({stores}) of a Pod the checker never saw")
        elif seen.refused or seen.refused_after_delete:
            continue  # Refused when captured (one that failed once deleted may be captured then).
        elif seen.final_known:
            verdicts.violated(
                2, _pod(seen), f"captured ({stores}) but never refused: last status {_brief(seen)}"
            )
        else:
            verdicts.unchecked(2, _pod(seen), f"captured ({stores}); its final status was not seen")
    verdicts.counts["captures stored"] = sum(len(v) for v in by_uid.values())
    return verdicts


def _reused_names(executions: Mapping[str, ExecutionHistory]) -> Counter[str]:
    return Counter(e.name for e in executions.values())


def _timing(pod: PodHistory, reused: Counter[str]) -> str:
    """What helps tell how a refused Pod lost its capture: when it failed before its delete, and
    whether its execution's name was used again."""
    parts = []
    if pod.refused_at is not None and pod.deleting_at is not None:
        parts.append(f"refused {pod.deleting_at - pod.refused_at:.1f}s before its delete was seen")
    if reused[pod.execution] > 1:
        parts.append(f"its execution's name was used {reused[pod.execution]} times")
    return f" ({'; '.join(parts)})" if parts else ""


def _judge_refused(
    verdicts: Verdicts, pod: PodHistory, found: list[Capture], *, reused: Counter[str], when: str = ""
) -> None:
    if not found:
        verdicts.violated(
            1,
            _pod(pod),
            f"refused ({_brief(pod)}) and deleted; no capture carries its UID{when}{_timing(pod, reused)}",
        )
        return
    per_record = Counter((c.where, c.slug, c.execution) for c in found if c.where != "journal")
    for (store, slug, execution), count in per_record.items():
        if count > 1:
            verdicts.violated(1, _pod(pod), f"captured {count} times in {store} {slug}/{execution}")
    if {c.where for c in found} >= {"launch", "retained"}:
        verdicts.counts["captured at launch and again by cleanup (launch kept the Pod)"] += 1
    ok = True
    for capture in found:
        where = f"{capture.where} {capture.slug}/{capture.execution}"
        if (capture.slug, capture.execution) != (pod.slug, pod.execution):
            verdicts.violated(1, _pod(pod), f"its capture is stored under another execution: {where}")
            ok = False
            continue
        if not ran(pod.status):
            continue  # Never ran: the capture has no log, so no marker; its UID is the evidence.
        markers = capture.markers()
        if pod.marker is not None and markers and pod.marker not in markers:
            verdicts.violated(
                1, _pod(pod), f"its capture in {where} carries another Pod's marker {sorted(markers)}"
            )
            ok = False
        elif pod.marker is not None and not markers and capture.has_logs():
            logs = [str(c.get("log"))[:160] for c in capture.containers() if "log" in c]
            verdicts.unchecked(1, _pod(pod), f"its capture in {where} has a log without any marker: {logs}")
            ok = False
        elif pod.marker is not None and not capture.has_logs():
            verdicts.counts["captures verified without logs (exit reasons only)"] += 1
    if ok:
        verdicts.counts["refused pods with their own capture"] += 1
        if ran(pod.status) and any(pod.marker in c.markers() for c in found if pod.marker):
            verdicts.counts["captures verified by marker"] += 1


def judge_deletes(
    pods: Mapping[str, PodHistory],
    *,
    executions: Mapping[str, ExecutionHistory] | None = None,
    losses: Sequence[Loss] = (),
) -> Verdicts:
    """Rule 3: the probe made when the checker saw each refused Pod let go: deleted and not held by
    the evidence finalizer (a delete the finalizer holds, the garbage collector's, say, loses
    nothing until the operator releases it after the capture). ``losses``
    (:class:`~.model.Loss`): a probe that found nothing, read after a loss that may have come
    after the Pod was refused, read a Redis that may have lost acknowledged writes (rule 1 judges
    the end, after the restore) and cannot tell. A loss between the refusal and the delete counts
    too: the capture may have been written, and acknowledged by a primary alone
    (``REDIS_MIN_REPLICAS=0``) that then lost it, and the delete came after, before the writer's
    restore put it back (docs/redis.md: the restore follows the new replication id, once a
    second). Only a loss over before the refusal (no capture could have been written yet) leaves
    the probe's answer standing."""
    verdicts = Verdicts()
    reused = _reused_names(executions or {})
    for pod in pods.values():
        if not pod.refused or not pod.gone:
            continue
        if pod.deleting_at is None or pod.probe is None:
            verdicts.unchecked(3, _pod(pod), "its delete was not seen (the watch was broken)")
        elif pod.probe.found is None:
            verdicts.unchecked(
                3, _pod(pod), f"Redis could not be read when it was deleted: {pod.probe.detail}"
            )
        elif not pod.probe.found and (lost := _lost_between(losses, _since(pod), pod.probe.at)):
            verdicts.unchecked(
                3,
                _pod(pod),
                f"no capture with its UID when probed ({pod.probe.detail}), but Redis may have lost "
                f"acknowledged writes between its refusal and the read ({_loss(lost, _since(pod))}; "
                f"its delete seen {pod.deleting_at - _since(pod):.1f}s after it was refused); rule 1 "
                "judges what was put back",
            )
        elif not pod.probe.found:
            verdicts.violated(
                3,
                _pod(pod),
                f"let go (deleted, not held) while Redis held no capture with its UID ({pod.probe.detail})"
                + _timing(pod, reused),
            )
        else:
            verdicts.counts["deletes with the capture already stored"] += 1
    return verdicts


def _since(pod: PodHistory) -> float:
    """The earliest its capture can have been written: once it was refused (first seen, if the
    refusal was not seen)."""
    return pod.refused_at if pod.refused_at is not None else pod.first_seen


def _lost_between(losses: Sequence[Loss], start: float, end: float | None) -> Loss | None:
    """The first loss that may have dropped a write made at or after ``start`` and before a read
    at ``end`` (an unknown ``end``: any time after ``start``): one not over before ``start`` and
    begun by ``end``; or None."""
    found = [loss for loss in losses if loss.ended >= start and (end is None or loss.began <= end)]
    return min(found, key=lambda loss: loss.began) if found else None


def _loss(loss: Loss, since: float) -> str:
    if loss.began == loss.ended:
        return f"a {loss.kind} kill {loss.began - since:.1f}s after it was seen refused"
    return (
        f"a {loss.kind} from {loss.began - since:.1f}s to {loss.ended - since:.1f}s after it was seen refused"
    )


def judge_leftovers(
    pods: Mapping[str, PodHistory],
    journal: Iterable[tuple[str, str]],
    *,
    planted: Mapping[str, str] | None = None,
    executions: Mapping[str, ExecutionHistory] | None = None,
    deletes: Mapping[str, list[str]] | None = None,
) -> Verdicts:
    """Rule 4: Pods not gone at the end, and journal entries left. ``deletes``: the audited
    deletes of each Pod name (:func:`audit.pod_deletes`), said with a held Pod's finding.

    ``planted``: Pods the soak created itself (an adoptable worker Pod, as a launch that crashed
    leaves one), by UID, with the UID of the Execution it was planted for. One left because that
    Execution was deleted before any launch was recorded on it was never the operator's: it could
    not be checked. A Pod held (Terminating) by the evidence finalizer is a leak, planted or not,
    unless it was planted and its Execution was deleted before the operator took it on at all
    (:attr:`~.model.ExecutionHistory.taken_on`: the garbage collector deletes such a Pod once its
    owner is gone, and no operator launch could have left it, so none was to release it).
    """
    verdicts = Verdicts()
    planted, executions, deletes = planted or {}, executions or {}, deletes or {}
    reused = _reused_names(executions)
    for pod in pods.values():
        if pod.gone:
            continue
        owner = executions.get(planted.get(pod.uid, ""))
        untouched = owner is None or not (owner.launched or owner.taken_on)
        if pod.held and pod.uid in planted and untouched:
            verdicts.unchecked(
                4,
                _pod(pod),
                f"left at the end ({_brief(pod)}); planted by the soak with the evidence finalizer, "
                "and its Execution was deleted before the operator took it on (never seen with a "
                "finalizer or a status): no launch leaves such a Pod (a launch holds the Execution "
                "and claims its name first), so nobody was to release it",
            )
        elif pod.held:
            verdicts.violated(
                4,
                _pod(pod),
                f"left at the end ({_brief(pod)}), being deleted and held by the evidence finalizer "
                f"{EVIDENCE_FINALIZER}: nobody took its evidence and released it{_timing(pod, reused)}"
                + _execution(executions, pod)
                + audit.describe(deletes.get(pod.name, [])),
            )
        elif pod.uid in planted and untouched:
            verdicts.unchecked(
                4,
                _pod(pod),
                f"left at the end ({_brief(pod)}); planted by the soak, and its Execution was gone "
                "before the operator held or launched it: the operator never took it on",
            )
        else:
            verdicts.violated(4, _pod(pod), f"left at the end ({_brief(pod)}){_timing(pod, reused)}")
    for slug, name in journal:
        verdicts.violated(4, f"cleanup-journal {slug}/{name}", "entry left at the end")
    return verdicts


def judge_convergence(
    executions: Mapping[str, ExecutionHistory], *, faults_end: float, bound: float
) -> Verdicts:
    """Rule 5. ``faults_end``: when the last fault ended (same clock as the histories)."""
    verdicts = Verdicts()
    lateness = [0.0]

    def within_bound(subject: str, *, at: float, did: str, counted: str) -> None:
        late = at - faults_end
        lateness.append(late)
        if late > bound:
            verdicts.violated(5, subject, f"{did} {late:.0f}s after the faults stopped (bound {bound:.0f}s)")
        else:
            verdicts.counts[counted] += 1

    for execution in executions.values():
        subject = f"execution {execution.name} (uid {execution.uid})"
        if execution.deleting_at is not None or execution.gone_at is not None or execution.vanished:
            if execution.gone_at is not None:
                within_bound(subject, at=execution.gone_at, did="gone", counted="executions deleted and gone")
            elif execution.vanished:
                verdicts.counts["executions deleted and gone"] += 1
            else:
                verdicts.violated(5, subject, f"still being deleted at the end (phase {execution.phase!r})")
        elif execution.converged_at is None:
            verdicts.violated(5, subject, f"not converged at the end: phase {execution.phase or '(none)'!r}")
        else:
            within_bound(
                subject, at=execution.converged_at, did="converged", counted=f"executions {execution.phase}"
            )
    latest = max(lateness)
    verdicts.counts["seconds to converge after the faults stopped"] = round(latest)
    return verdicts


def judge_operators(lives: Sequence[OperatorLife], *, rss_bound_mib: float) -> Verdicts:
    """Rule 6."""
    verdicts = Verdicts()
    without_metrics = []
    for life in lives:
        subject = f"operator {life.replica} (pid {life.pid})"
        peak = life.peak_rss_kib / 1024
        verdicts.counts["peak RSS MiB"] = max(verdicts.counts["peak RSS MiB"], round(peak))
        if life.samples == 0:
            verdicts.unchecked(6, subject, "its memory was never read")
        elif peak > rss_bound_mib:
            verdicts.violated(6, subject, f"VmHWM {peak:.0f} MiB, above the bound of {rss_bound_mib:.0f} MiB")
        if life.exit_code is not None and not life.killed_by_soak:
            verdicts.violated(6, subject, f"exited by itself with code {life.exit_code}")
        if life.tasks_up is None:
            without_metrics.append(life)
            continue
        down = sorted(task for task, up in life.tasks_up.items() if up != 1)
        if down:
            verdicts.violated(6, subject, f"background tasks down at its last scrape: {down}")
        verdicts.counts["background task restarts"] += int(sum((life.task_restarts or {}).values()))
    if without_metrics:
        scraped = sum(1 for life in without_metrics if life.scrapes)
        verdicts.unchecked(
            6,
            f"{len(without_metrics)} operator processes",
            "no agentihooks_swarm_task_up on their /metrics "
            f"({scraped} answered a scrape): whether a background task died is not known",
        )
    return verdicts


def attribute(
    pods: Mapping[str, PodHistory],
    executions: Mapping[str, ExecutionHistory],
    *,
    planted: Mapping[str, str] | None = None,
) -> dict[str, str | None]:
    """Pod UID -> the UID of the Execution it is the worker of (None: no Execution of its name
    was seen). A Pod the soak planted belongs to the Execution it was planted for; one with a
    controller reference to an Execution, to that Execution; any other to the newest Execution of
    its name first seen no later than the Pod (the earliest, for a Pod seen first: the two watches
    are not ordered between them)."""
    planted = planted or {}
    lives: dict[str, list[ExecutionHistory]] = defaultdict(list)
    for execution in executions.values():
        lives[execution.name].append(execution)
    for found in lives.values():
        found.sort(key=lambda e: e.first_seen)
    owners: dict[str, str | None] = {}
    for pod in pods.values():
        if pod.uid in planted:
            owners[pod.uid] = planted[pod.uid]
            continue
        if pod.controller is not None:
            owners[pod.uid] = pod.controller
            continue
        named = lives.get(pod.execution, [])
        before = [e for e in named if e.first_seen <= pod.first_seen]
        chosen = before[-1] if before else (named[0] if named else None)
        owners[pod.uid] = chosen.uid if chosen is not None else None
    return owners


def forgotten_lives(pods: Mapping[str, PodHistory], forgets: Iterable[Forgotten]) -> dict[str, Forgotten]:
    """Pod UID -> the forget that removed its records: every Pod of the name seen before it."""
    found: dict[str, Forgotten] = {}
    for forget in sorted(forgets, key=lambda f: f.forgotten_at):
        for pod in pods.values():
            if (pod.slug, pod.execution) == (
                forget.slug,
                forget.name,
            ) and pod.first_seen < forget.forgotten_at:
                found.setdefault(pod.uid, forget)
    return found


def _where(capture: Capture) -> str:
    return f"{capture.where} {capture.slug}/{capture.execution}"


def judge_names(
    pods: Mapping[str, PodHistory],
    captures: Sequence[Capture],
    owners: Mapping[tuple[str, str], str],
    *,
    attributed: Mapping[str, str | None],
    forgets: Sequence[Forgotten] = (),
    restores: Sequence[Restore] = (),
    redis_read: bool = True,
    origin: float = 0.0,
) -> Verdicts:
    """Rule 7 (see the module docstring). ``owners``: (slug, name) -> the owner claim's UID at the
    end; ``attributed``: :func:`attribute`; ``restores``: what the operators logged they put back.
    ``origin``: the soak's start (findings say times from it)."""
    verdicts = Verdicts()
    if not redis_read:
        if forgets or restores:
            verdicts.unchecked(7, "the end state", "Redis could not be read at the end")
        return verdicts
    forgotten = forgotten_lives(pods, forgets)
    by_name: dict[tuple[str, str], list[Capture]] = defaultdict(list)
    for capture in captures:
        by_name[(capture.slug, capture.execution)].append(capture)
    # A forgotten life stays forgotten: none of its Pods' captures, nor its owner claim, is back.
    for capture in captures:
        forget = forgotten.get(capture.uid)
        if forget is not None:
            verdicts.violated(
                7,
                _where(capture),
                f"holds pod {capture.pod} (uid {capture.uid}) of the life forgotten at "
                f"{forget.forgotten_at - origin:.1f}s (Execution uid {forget.old_uid})"
                + _restored_since(restores, forget, origin=origin),
            )
    for forget in forgets:
        verdicts.counts["names forgotten"] += 1
        if owners.get((forget.slug, forget.name)) == forget.old_uid:
            verdicts.violated(
                7,
                f"execution-owners {forget.slug}/{forget.name}",
                f"the owner claim of the life forgotten at {forget.forgotten_at - origin:.1f}s (uid "
                f"{forget.old_uid}) is back" + _restored_since(restores, forget, origin=origin),
            )
    # Every record under a name is its owner's.
    for (slug, name), found in sorted(by_name.items()):
        owner = owners.get((slug, name))
        seen = [c for c in found if c.uid in pods and c.uid not in forgotten]
        if owner is None:
            lives = sorted({str(attributed.get(c.uid)) for c in seen}) or ["none the checker saw"]
            verdicts.unchecked(
                7,
                f"{slug}/{name}",
                f"records ({', '.join(sorted({c.where for c in found}))}; their Pods' Executions: "
                f"{', '.join(lives)}) and no owner claim: whose they are cannot be told",
            )
            continue
        strangers = [c for c in seen if attributed.get(c.uid) not in (None, owner)]
        for capture in strangers:
            verdicts.violated(
                7,
                _where(capture),
                f"holds pod {capture.pod} (uid {capture.uid}) of Execution uid "
                f"{attributed.get(capture.uid)}, but the name is owned by Execution uid {owner}",
            )
        if not strangers:
            verdicts.counts["names whose records are their owner's"] += 1
    verdicts.extend(
        _judge_restores(
            restores, by_name=by_name, owners=owners, forgets=forgets, attributed=attributed, origin=origin
        )
    )
    return verdicts


def _restored_since(restores: Sequence[Restore], forget: Forgotten, *, origin: float) -> str:
    since = [
        r
        for r in restores
        if (r.slug, r.execution) == (forget.slug, forget.name) and r.at >= forget.forgotten_at
    ]
    if not since:
        return ""
    said = ", ".join(f"{r.kind} by {r.replica} at {r.at - origin:.1f}s" for r in since)
    return f"; the operators logged they restored it since: {said}"


def _judge_restores(
    restores: Sequence[Restore],
    *,
    by_name: Mapping[tuple[str, str], list[Capture]],
    owners: Mapping[tuple[str, str], str],
    forgets: Sequence[Forgotten],
    attributed: Mapping[str, str | None],
    origin: float,
) -> Verdicts:
    """Rule 7 for each record an operator logged it put back: at the end it is its name's
    owner's, and of no life forgotten before the restore."""
    verdicts = Verdicts()
    for restore in restores:
        verdicts.counts["records restored (logged)"] += 1
        verdicts.counts[f"records restored (logged): {restore.kind}"] += 1
        subject = f"{restore.kind} record of {restore.slug}/{restore.execution} restored by {restore.replica}"
        subject += f" at {restore.at - origin:.1f}s"
        named = [f for f in forgets if (f.slug, f.name) == (restore.slug, restore.execution)]
        if any(f.forgotten_at > restore.at for f in named):
            verdicts.counts["records restored, then forgotten by the user"] += 1
            continue
        earlier = [f for f in named if f.forgotten_at <= restore.at]
        owner = owners.get((restore.slug, restore.execution))
        held = [
            c
            for c in by_name.get((restore.slug, restore.execution), [])
            if c.where in RESTORED_IN.get(restore.kind, ())
        ]
        # Without an owner claim at the end, only a forgotten life's Pod is known to be wrong (a
        # name that never launched has records and no claim: a planted Pod's capture).
        wrong = [
            c
            for c in held
            if (owner is not None and attributed.get(c.uid) not in (None, owner))
            or any(attributed.get(c.uid) == f.old_uid for f in earlier)
        ]
        if owner is not None and any(owner == f.old_uid for f in earlier):
            verdicts.violated(
                7, subject, f"the name is owned again by the life forgotten before (uid {owner})"
            )
        elif wrong:
            verdicts.violated(
                7,
                subject,
                "holds Pods of another life: "
                + ", ".join(f"{c.pod} (uid {c.uid}, Execution uid {attributed.get(c.uid)})" for c in wrong),
            )
        elif owner is None:
            verdicts.unchecked(7, subject, "no owner claim for the name at the end")
        elif not held and restore.kind == "startup":
            verdicts.unchecked(7, subject, "no launch record under the name at the end")
        else:
            verdicts.counts[
                "records restored that match (the owner is their life, never a forgotten one)"
            ] += 1
    return verdicts


def judge_done(
    pods: Mapping[str, PodHistory],
    executions: Mapping[str, ExecutionHistory],
    *,
    attributed: Mapping[str, str | None],
    slack: float = DONE_SLACK,
    origin: float = 0.0,
) -> Verdicts:
    """Rule 8 (see the module docstring); ``origin``: the soak's start (findings say times from it)."""
    verdicts = Verdicts()
    workers: dict[tuple[str, int], list[PodHistory]] = defaultdict(list)
    for pod in pods.values():
        owner = attributed.get(pod.uid)
        if owner is not None:
            workers[(owner, pod.attempt)].append(pod)
    for execution in executions.values():
        for attempt, done_at in sorted(execution.done.items()):
            verdicts.counts["Done attempts judged"] += 1
            late = False
            for pod in workers.get((execution.uid, attempt), []):
                said = (
                    f"its Execution (uid {execution.uid}, attempt {attempt}) was seen Done at "
                    f"{done_at - origin:.1f}s"
                )
                if pod.first_seen > done_at + slack:
                    verdicts.violated(8, _pod(pod), f"first seen at {pod.first_seen - origin:.1f}s; {said}")
                elif pod.deleting_at is not None:
                    if pod.deleting_at > done_at + slack:
                        verdicts.violated(
                            8,
                            _pod(pod),
                            f"its delete was first seen at {pod.deleting_at - origin:.1f}s; {said}",
                        )
                        late = True
                elif not pod.gone:
                    verdicts.violated(8, _pod(pod), f"still there at the end ({_brief(pod)}); {said}")
                    late = True
                else:
                    verdicts.unchecked(
                        8, _pod(pod), f"gone while the checker's watch was broken (when is not known); {said}"
                    )
            if not late:
                verdicts.counts["Done attempts whose workers were gone or going"] += 1
    return verdicts


def judge_reapplied(
    pods: Mapping[str, PodHistory],
    executions: Mapping[str, ExecutionHistory],
    forgets: Sequence[Forgotten],
    *,
    attributed: Mapping[str, str | None],
) -> Verdicts:
    """Counts only (rules 1, 4, 7 and 8 judge them): what became of the names applied again."""
    verdicts = Verdicts()
    for forget in forgets:
        if forget.new_uid is None:
            continue
        verdicts.counts["new lives applied"] += 1
        verdicts.counts["new lives applied while the links were held"] += int(forget.in_hold)
        execution = executions.get(forget.new_uid)
        if execution is not None and execution.done:
            verdicts.counts["new lives Done"] += 1
        for pod in pods.values():
            if attributed.get(pod.uid) != forget.new_uid:
                continue
            verdicts.counts["new lives: worker Pods"] += 1
            verdicts.counts["new lives: worker Pods gone"] += int(pod.gone)
            verdicts.counts["new lives: refused worker Pods gone"] += int(pod.refused and pod.gone)
    return verdicts


def _execution(executions: Mapping[str, ExecutionHistory], pod: PodHistory) -> str:
    """What the checker last saw of the Execution a Pod's controller reference names."""
    owner = executions.get(pod.controller or "")
    if owner is None:
        return ""
    gone = "gone" if owner.gone_at is not None or owner.vanished else "not deleted"
    return f"; its Execution: {gone}, phase {owner.phase or '(none)'}, conditions [{owner.conditions}]"


def count_lost_races(
    pods: Mapping[str, PodHistory], lost_race: Iterable[str], *, attributed: Mapping[str, str | None]
) -> Verdicts:
    """Counts only (rules 1 to 4 and 8 judge their Pods as any other): the refused-adopted
    Executions (by UID) whose worker Pod the operator created before the soak's, and their Pods."""
    verdicts = Verdicts()
    lost = set(lost_race)
    verdicts.counts["refused-adopted: the operator's Pod first"] = len(lost)
    for pod in pods.values():
        if attributed.get(pod.uid) in lost:
            verdicts.counts["refused-adopted: the operator's Pods seen"] += 1
            refused_and_gone = int(pod.refused and pod.gone)
            verdicts.counts["refused-adopted: the operator's Pods refused and gone"] += refused_and_gone
    return verdicts


def _brief(pod: PodHistory) -> str:
    status = pod.status
    codes = [
        str(((c.get("state") or {}).get("terminated") or {}).get("exitCode"))
        for c in status.get("containerStatuses") or []
        if ((c.get("state") or {}).get("terminated"))
    ]
    waiting = [
        str(((c.get("state") or {}).get("waiting") or {}).get("reason"))
        for c in status.get("containerStatuses") or []
        if ((c.get("state") or {}).get("waiting"))
    ]
    parts = [f"phase {status.get('phase') or '?'}"]
    if pod.deleting_at is not None and not pod.gone:
        parts.append("terminating" + (f" (finalizers {', '.join(pod.finalizers)})" if pod.finalizers else ""))
    if status.get("reason"):
        parts.append(f"reason {status['reason']}")
    if codes:
        parts.append(f"exit {','.join(codes)}")
    if waiting:
        parts.append(f"waiting {','.join(waiting)}")
    return " ".join(parts)
