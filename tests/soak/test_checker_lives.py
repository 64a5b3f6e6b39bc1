"""The soak's checks of issue 27 on fabricated histories: names forgotten and applied again, the
records the operators put back after a failover (rule 7), Done only once the worker is gone (rule
8), and what feeds them (the operators' log lines and metrics, the plan). Each rule flags a history
that breaks it, passes one that keeps it, and says "could not check" where the history cannot tell.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.soak import plan
from tests.soak.checker import audit, model, observe, rules
from tests.soak.checker.model import Capture, ExecutionHistory, Forgotten, PodHistory, Restore
from tests.soak.faults import Alone, Injected, Ledger
from tests.soak.redis_set import Gate
from tests.support import pods
from tests.support.redis_server import RedisServerError

SLUG = "exit78"
NAME = "x1"


def _failed() -> dict[str, Any]:
    return {
        "phase": "Failed",
        "containerStatuses": [{"name": "worker", "state": {"terminated": {"exitCode": 78}}}],
    }


def _pod(
    uid: str,
    *,
    first_seen: float,
    deleting_at: float | None = None,
    gone: bool = True,
    vanished: bool = False,
    attempt: int = 1,
    status: Mapping[str, Any] | None = None,
) -> PodHistory:
    pod = PodHistory(
        uid=uid,
        name=f"swarm-worker-{NAME}-{attempt}",
        slug=SLUG,
        execution=NAME,
        marker=None,
        first_seen=first_seen,
        attempt=attempt,
    )
    pod.observe(status=status if status is not None else _failed(), deleting=False, at=first_seen)
    pod.deleting_at = deleting_at
    pod.deleted = gone and not vanished
    pod.vanished = vanished
    return pod


def _life(uid: str, *, first_seen: float, done: Mapping[int, float] | None = None) -> ExecutionHistory:
    return ExecutionHistory(uid=uid, name=NAME, first_seen=first_seen, done=dict(done or {}))


def _launch(uid: str) -> list[Capture]:
    raw = json.dumps(
        {"pod": f"swarm-worker-{NAME}-1", "uid": uid, "labels": {}, "startup": {"phase": "Failed"}}
    )
    return model.captures_from(where="launch", slug=SLUG, execution=NAME, raw=raw)


def _retained(*uids: str) -> list[Capture]:
    pods = [{"name": f"swarm-worker-{NAME}-1", "uid": u, "outcome": "deleted", "startup": {}} for u in uids]
    raw = json.dumps({"execution": NAME, "removed": {"pods": pods}})
    return model.captures_from(where="retained", slug=SLUG, execution=NAME, raw=raw)


def _forgotten(*, before: list[Capture] | None, at: float = 10.0) -> Forgotten:
    return Forgotten(slug=SLUG, name=NAME, old_uid="old", forgotten_at=at, before=before, new_uid="new")


def _findings(verdicts: rules.Verdicts) -> list[tuple[int, str]]:
    return [(f.rule, f.verdict) for f in verdicts.findings]


#: The old life (uid ``old``, first seen at 0, its Pod ``p-old``), forgotten at 10 s, and the new
#: one (uid ``new``, applied at 12 s, its Pod ``p-new``).
LIVES = {"old": _life("old", first_seen=0.0, done={1: 4.0}), "new": _life("new", first_seen=12.0)}


def _pods() -> dict[str, PodHistory]:
    return {
        "p-old": _pod("p-old", first_seen=1.0, deleting_at=3.0),
        "p-new": _pod("p-new", first_seen=13.0, deleting_at=15.0),
    }


# -- which life a Pod is of ----------------------------------------------------------------------


def test_a_pod_belongs_to_the_newest_life_of_its_name_seen_before_it_or_to_its_planter() -> None:
    pods = _pods()
    pods["p-early"] = _pod("p-early", first_seen=11.5)  # Planted for the new life before it came.
    attributed = rules.attribute(pods, LIVES, planted={"p-early": "new"})
    assert attributed == {"p-old": "old", "p-new": "new", "p-early": "new"}
    assert rules.attribute({"p": _pod("p", first_seen=0.0)}, {}) == {"p": None}


def test_a_pod_with_a_controller_reference_belongs_to_the_execution_it_names() -> None:
    """The operator's own Pod of a refused-adopted Execution whose create came before the soak's:
    judged as that Execution's worker, whatever the order the two watches saw them in."""
    seen = _pods()
    seen["p-early"] = _pod("p-early", first_seen=11.5, gone=False)  # Seen before its Execution.
    seen["p-early"].controller = "new"
    attributed = rules.attribute(seen, LIVES)
    assert attributed["p-early"] == "new"
    counted = rules.count_lost_races(seen, {"new"}, attributed=attributed)
    assert counted.counts["refused-adopted: the operator's Pod first"] == 1
    assert counted.counts["refused-adopted: the operator's Pods seen"] == 2  # p-new (by name), p-early
    assert counted.counts["refused-adopted: the operator's Pods refused and gone"] == 1  # p-new


def test_a_pod_model_reads_its_controller_and_finalizers() -> None:
    reference = {"apiVersion": "swarm.agentihooks.io/v1alpha1", "kind": "Execution", "uid": "e1"}
    body: dict[str, Any] = {
        "metadata": {
            "ownerReferences": [{**reference, "controller": True}],
            "finalizers": [model.EVIDENCE_FINALIZER],
        }
    }
    assert model.pod_controller(body) == "e1"
    assert model.pod_finalizers(body) == (model.EVIDENCE_FINALIZER,)
    assert model.pod_controller({"metadata": {"ownerReferences": [reference]}}) is None
    assert model.pod_finalizers({"metadata": {}}) == ()


def test_a_pod_held_by_the_evidence_finalizer_at_the_end_is_a_leak() -> None:
    """Deleted, and still Terminating under the evidence finalizer: nobody took its evidence and
    released it. A planted Pod is excused only when its Execution was deleted before the operator
    took it on at all (no launch could have left that Pod)."""
    taken_on = ExecutionHistory(uid="e1", name=NAME, gone_at=3.0)
    taken_on.observe(body={"metadata": {}, "status": {"phase": "Pending"}}, at=1.5)
    untouched = ExecutionHistory(uid="e2", name=NAME, gone_at=3.0)
    untouched.observe(body={"metadata": {}}, at=1.5)
    assert taken_on.taken_on and not untouched.taken_on and not taken_on.launched
    lives = {"e1": taken_on, "e2": untouched}
    held = _pod("u1", first_seen=1.0, deleting_at=2.0, gone=False)
    held.finalizers = (model.EVIDENCE_FINALIZER,)

    def judged(planted: Mapping[str, str]) -> rules.Verdicts:
        return rules.judge_leftovers({"u1": held}, [], planted=planted, executions=lives)

    leak = judged({})  # The operator's own Pod.
    assert _findings(leak) == [(4, "violated")]
    assert model.EVIDENCE_FINALIZER in leak.findings[0].detail and "terminating" in leak.findings[0].detail
    assert _findings(judged({"u1": "e1"})) == [(4, "violated")]  # Planted, and its Execution taken on.
    assert _findings(judged({"u1": "e2"})) == [(4, "unchecked")]  # Deleted before the operator saw it.


def test_a_held_pods_finding_names_the_audited_deletes_of_its_name(tmp_path: Path) -> None:
    """Who deleted a Pod left held: the API server's audit log, read at the end, names each delete
    of its name (kwok deletes by name, so its late deletes reach the next Pod of that name)."""
    log = tmp_path / "audit.jsonl"
    held = _pod("u1", first_seen=1.0, deleting_at=2.0, gone=False)
    held.finalizers = (model.EVIDENCE_FINALIZER,)

    def delete(agent: str, code: int, at: str, name: str = "") -> str:
        ref = {"resource": "pods", "namespace": "soak", "name": name or held.name}
        return json.dumps(
            {
                "verb": "delete",
                "objectRef": ref,
                "userAgent": f"{agent}/v1 (linux/amd64)",
                "responseStatus": {"code": code},
                "requestReceivedTimestamp": f"2026-12-06T{at}Z",
            }
        )

    lines = [delete("OpenAPI-Generator", 200, "12:01:55.116276"), delete("kwok", 404, "12:01:59.327771")]
    lines += [delete("kwok", 200, "12:02:07.239760"), delete("kwok", 200, "12:02:08.000000", name="other")]
    log.write_text("\n".join([*lines, '{"cut short']), encoding="utf-8")
    deletes = audit.pod_deletes(log)
    assert deletes[held.name] == [
        "OpenAPI-Generator 200 at 12:01:55.116",
        "kwok 404 at 12:01:59.327",
        "kwok 200 at 12:02:07.239",
    ]
    [finding] = rules.judge_leftovers({"u1": held}, [], deletes=deletes).findings
    assert finding.detail.endswith(
        "; deletes of its name (audit log): OpenAPI-Generator 200 at 12:01:55.116, "
        "kwok 404 at 12:01:59.327, kwok 200 at 12:02:07.239"
    )
    assert audit.pod_deletes(tmp_path / "none.jsonl") == {}


def test_the_pods_of_a_forgotten_life_are_the_ones_seen_before_the_forget() -> None:
    forget = _forgotten(before=[])
    assert rules.forgotten_lives(_pods(), [forget]) == {"p-old": forget}


# -- rule 1 for a forgotten life: judged just before the forget ---------------------------------


def test_a_forgotten_lifes_refused_pod_is_judged_by_what_redis_held_before_the_forget() -> None:
    pods = {"p-old": _pods()["p-old"]}
    kept = rules.judge_captures(pods, [], forgotten={"p-old": _forgotten(before=_launch("p-old"))})
    assert _findings(kept) == []
    assert kept.counts["refused pods of forgotten lives (judged just before the forget)"] == 1
    lost = rules.judge_captures(pods, [], forgotten={"p-old": _forgotten(before=_launch("other"))})
    assert _findings(lost) == [(1, "violated")]
    assert "just before the forget" in lost.findings[0].detail
    unread = rules.judge_captures(pods, [], forgotten={"p-old": _forgotten(before=None)})
    assert _findings(unread) == [(1, "unchecked")]


def test_a_forgotten_lifes_capture_missing_after_redis_lost_writes_could_not_be_checked() -> None:
    pods = {"p-old": _pods()["p-old"]}
    forget = _forgotten(before=[])
    forget.read_at = 9.0
    lost = rules.judge_captures(pods, [], forgotten={"p-old": forget}, losses=[_kill(5.0)])
    assert _findings(lost) == [(1, "unchecked")]
    earlier = rules.judge_captures(pods, [], forgotten={"p-old": forget}, losses=[_kill(0.5)])
    assert _findings(earlier) == [(1, "violated")]  # Lost before it was even refused: not that.


# -- rule 3 and redis-lost-writes -----------------------------------------------------------------


def _kill(at: float) -> model.Loss:
    return model.Loss(kind="redis-lost-writes", began=at, ended=at)


def _deleted(*, found: bool, read_at: float) -> PodHistory:
    """Refused (first seen) at 1, deleted at 3, probed at ``read_at``."""
    pod = _pod("p", first_seen=1.0, deleting_at=3.0)
    pod.probe = model.Probe(found=found, detail="records held: none", at=read_at)
    return pod


def _judged(pod: PodHistory, losses: list[model.Loss]) -> list[tuple[int, str]]:
    return _findings(rules.judge_deletes({pod.uid: pod}, losses=losses))


def test_a_probe_that_read_after_redis_lost_writes_could_not_be_checked() -> None:
    assert _judged(_deleted(found=False, read_at=8.0), [_kill(5.0)]) == [(3, "unchecked")]
    assert _judged(_deleted(found=False, read_at=4.0), [_kill(5.0)]) == [(3, "violated")]  # Read before.
    # Refused at 1, deleted at 3: a capture acknowledged by the old primary alone, the kill, then
    # the delete before the restore put the capture back on the new primary.
    assert _judged(_deleted(found=False, read_at=8.0), [_kill(2.0)]) == [(3, "unchecked")]
    assert _judged(_deleted(found=False, read_at=8.0), [_kill(0.5)]) == [(3, "violated")]  # Before refused.
    assert _judged(_deleted(found=True, read_at=8.0), [_kill(5.0)]) == []


def test_a_probe_inside_a_primary_kills_window_could_not_be_checked() -> None:
    """An old primary started again answers writes until the Sentinels convert it: a capture
    written at any time in the window, and a read after it began, cannot tell."""

    def window(began: float, ended: float) -> model.Loss:
        return model.Loss(kind="redis-primary-kill", began=began, ended=ended)

    # Refused at 1 inside a window from 0 to 6 (the old primary answered it), read at 3.
    assert _judged(_deleted(found=False, read_at=3.0), [window(0.0, 6.0)]) == [(3, "unchecked")]
    assert _judged(_deleted(found=False, read_at=8.0), [window(2.0, 6.0)]) == [(3, "unchecked")]
    # Over before the refusal, or begun only after the read: the probe's answer stands.
    assert _judged(_deleted(found=False, read_at=8.0), [window(-5.0, 0.5)]) == [(3, "violated")]
    assert _judged(_deleted(found=False, read_at=2.5), [window(2.6, 6.0)]) == [(3, "violated")]


def test_the_ledger_counts_a_primary_kill_as_a_loss_only_without_replicas() -> None:
    def fault(kind: str, started: float, ended: float, killed: float | None = None) -> Injected:
        return Injected(kind=kind, planned_at=started, started=started, ended=ended, killed=killed)

    ledger = Ledger(
        injected=[
            fault("redis-primary-kill", 10.0, 20.0),  # REDIS_MIN_REPLICAS=1: a write needs a replica.
            fault("redis-primary-restart", 110.0, 115.0),  # No failover: the same primary again.
            fault("redis-primary-kill", 120.0, 131.0),
            fault("redis-lost-writes", 140.0, 160.0, killed=145.0),
        ],
        changes=[fault("REDIS_MIN_REPLICAS=0", 100.0, 103.0)],
    )
    assert ledger.losses(origin=1000.0) == [
        model.Loss(kind="redis-primary-kill", began=1120.0, ended=1131.0),
        model.Loss(kind="redis-lost-writes", began=1145.0, ended=1145.0),
    ]


# -- rule 7 ---------------------------------------------------------------------------------------


def _names(
    captures: list[Capture], owners: Mapping[tuple[str, str], str], restores: list[Restore] | None = None
) -> rules.Verdicts:
    pods = _pods()
    return rules.judge_names(
        pods,
        captures,
        owners,
        attributed=rules.attribute(pods, LIVES),
        forgets=[_forgotten(before=_launch("p-old"))],
        restores=restores or [],
    )


def test_a_name_forgotten_and_applied_again_holds_only_its_new_lifes_records() -> None:
    verdicts = _names(_launch("p-new") + _retained("p-new"), {(SLUG, NAME): "new"})
    assert _findings(verdicts) == []
    assert verdicts.counts["names whose records are their owner's"] == 1


def test_a_forgotten_lifes_capture_back_at_the_end_is_a_violation() -> None:
    restored = Restore(kind="retained", slug=SLUG, execution=NAME, at=14.0, replica="a")
    verdicts = _names(_retained("p-old"), {(SLUG, NAME): "new"}, [restored])
    assert (7, "violated") in _findings(verdicts)
    back = next(f for f in verdicts.findings if "life forgotten" in f.detail)
    assert "retained by a at 14.0s" in back.detail  # It says which restore brought it back.


def test_a_forgotten_owner_claim_back_at_the_end_is_a_violation() -> None:
    verdicts = _names(_launch("p-new"), {(SLUG, NAME): "old"})
    assert (7, "violated") in _findings(verdicts)
    assert any("owner claim of the life forgotten" in f.detail for f in verdicts.findings)


def test_records_under_a_name_without_an_owner_claim_could_not_be_checked() -> None:
    assert _findings(_names(_launch("p-new"), {})) == [(7, "unchecked")]


def test_a_record_put_back_is_judged_against_the_name_at_the_end() -> None:
    def restore(kind: str, at: float) -> Restore:
        return Restore(kind=kind, slug=SLUG, execution=NAME, at=at, replica="a")

    match = _names(_launch("p-new"), {(SLUG, NAME): "new"}, [restore("startup", 14.0)])
    assert _findings(match) == []
    assert match.counts["records restored that match (the owner is their life, never a forgotten one)"] == 1
    before = _names(_launch("p-new"), {(SLUG, NAME): "new"}, [restore("retained", 5.0)])
    assert _findings(before) == []  # The old life's, put back before the user forgot it.
    assert before.counts["records restored, then forgotten by the user"] == 1
    wrong = _names(_launch("p-old"), {(SLUG, NAME): "new"}, [restore("startup", 14.0)])
    assert [f.subject for f in wrong.findings if f.verdict == "violated"][-1].startswith("startup record")
    absent = _names(_retained("p-new"), {(SLUG, NAME): "new"}, [restore("startup", 14.0)])
    assert _findings(absent) == [(7, "unchecked")]


def test_a_record_put_back_under_a_name_without_an_owner_claim_is_wrong_only_of_a_forgotten_life() -> None:
    """A name whose Execution never launched (deleted at once, its planted Pod captured) has
    records and no claim: a restore of them cannot be judged by an owner, only by the forgets."""
    restore = Restore(kind="retained", slug=SLUG, execution=NAME, at=14.0, replica="a")
    unclaimed = _names(_retained("p-new"), {}, [restore])
    assert _findings(unclaimed) == [(7, "unchecked"), (7, "unchecked")]  # The name, and the restore.
    assert any(f.detail == "no owner claim for the name at the end" for f in unclaimed.findings)
    forgotten = _names(_retained("p-old"), {}, [restore])
    assert (7, "violated") in _findings(forgotten)
    violated = [f.subject for f in forgotten.findings if f.verdict == "violated"]
    assert any(subject.startswith("retained record") for subject in violated)


def test_an_owner_claim_put_back_is_judged_by_whose_life_owns_the_name_at_the_end() -> None:
    claim = Restore(kind="owner", slug=SLUG, execution=NAME, at=14.0, replica="a")
    match = _names(_launch("p-new"), {(SLUG, NAME): "new"}, [claim])
    assert _findings(match) == []
    assert match.counts["records restored that match (the owner is their life, never a forgotten one)"] == 1
    forgotten = _names(_launch("p-new"), {(SLUG, NAME): "old"}, [claim])
    assert (7, "violated") in _findings(forgotten)


def test_redis_unread_at_the_end_leaves_rule_7_unchecked() -> None:
    verdicts = rules.judge_names(
        _pods(), [], {}, attributed={}, forgets=[_forgotten(before=[])], redis_read=False
    )
    assert _findings(verdicts) == [(7, "unchecked")]


# -- rule 8 ---------------------------------------------------------------------------------------


def _done(pod: PodHistory, *, done_at: float = 14.0) -> rules.Verdicts:
    lives = {"new": _life("new", first_seen=12.0, done={1: done_at})}
    return rules.judge_done({pod.uid: pod}, lives, attributed={pod.uid: "new"})


def test_done_after_its_worker_was_deleted_passes() -> None:
    verdicts = _done(_pod("p", first_seen=12.5, deleting_at=13.0))
    assert _findings(verdicts) == []
    assert verdicts.counts["Done attempts whose workers were gone or going"] == 1
    # The two watches are not ordered: a delete seen a moment after the Done is the same story.
    assert _findings(_done(_pod("p", first_seen=12.5, deleting_at=14.0 + rules.DONE_SLACK - 1))) == []


def test_done_while_its_worker_runs_is_a_violation() -> None:
    left = _pod("p", first_seen=12.5, gone=False, status={"phase": "Running"})
    assert _findings(_done(left)) == [(8, "violated")]
    late = _pod("p", first_seen=12.5, deleting_at=14.0 + rules.DONE_SLACK + 5)
    assert _findings(_done(late)) == [(8, "violated")]
    after = _pod("p", first_seen=14.0 + rules.DONE_SLACK + 1, deleting_at=40.0)
    assert _findings(_done(after)) == [(8, "violated")]


def test_a_worker_gone_while_the_watch_was_broken_could_not_be_checked() -> None:
    assert _findings(_done(_pod("p", first_seen=12.5, vanished=True))) == [(8, "unchecked")]


def test_another_attempts_worker_is_not_judged_by_this_attempts_done() -> None:
    assert _findings(_done(_pod("p", first_seen=30.0, gone=False, attempt=2))) == []


# -- what feeds them ------------------------------------------------------------------------------


def test_the_operators_restore_lines_are_read_with_their_times(tmp_path: Path) -> None:
    log = tmp_path / "operator-a.log"
    log.write_text(
        "[2026-12-04 11:51:09,513] agentihooks_swarm.fa [WARNING ] Restored the startup record of "
        "exit78/x00012: the new Redis primary did not have it.\n"
        "[2026-12-04 11:51:09,600] agentihooks_swarm.fa [WARNING ] Restored the journal record of "
        "ok/x00003, but 0 of 1 replicas acknowledged it\n"
        "[2026-12-04 11:51:10,000] agentihooks_swarm.fa [INFO    ] Did not restore the retained record of "
        "ok/x00004: its records were forgotten since.\n"
    )
    wall = time.mktime(time.strptime("2026-12-04 11:51:09", "%Y-%m-%d %H:%M:%S"))
    found = observe.restores_logged(log, replica="a", wall_offset=wall - 100.0)
    assert [(r.kind, r.slug, r.execution, r.short, r.replica) for r in found] == [
        ("startup", "exit78", "x00012", False, "a"),
        ("journal", "ok", "x00003", True, "a"),
    ]
    assert found[0].at == pytest.approx(100.513)
    assert observe.restores_logged(tmp_path / "none.log", replica="a", wall_offset=0.0) == []


def test_the_restore_counters_are_read_from_metrics() -> None:
    text = (
        "# HELP agentihooks_swarm_evidence_restored_total records put back\n"
        'agentihooks_swarm_evidence_restored_total{record="startup"} 2.0\n'
        'agentihooks_swarm_evidence_restored_created{record="startup"} 1.7e9\n'
        'agentihooks_swarm_evidence_restore_skipped_total{reason="forgotten"} 1.0\n'
    )
    assert observe.restores(text) == ({"startup": 2.0}, {"forgotten": 1.0})
    assert observe.restores("") == ({}, {})


def test_an_owner_claim_gives_its_uid_and_a_broken_one_is_refused() -> None:
    assert model.owner_uid('{"uid": "u1", "namespace": "soak", "at": "x"}') == "u1"
    assert model.owner_uid(None) is None
    with pytest.raises(model.RecordError):
        model.owner_uid('{"namespace": "soak"}')


def test_a_plan_loses_writes_only_once_the_operators_run_without_replicas() -> None:
    made = plan.make(seed=5, executions=315, period=60, faults=48, heavy_once=True)
    switch = made.unreplicated_at
    assert switch is not None and switch == pytest.approx(60 * plan.UNREPLICATED_SHARE)
    lost = [f for f in made.faults if f.kind == "redis-lost-writes"]
    assert len(lost) == 1 and lost[0].at >= switch + plan.AFTER_SWITCH
    assert 1.0 <= lost[0].hold <= 3.0
    forgotten = [e for e in made.executions if e.forget]
    in_hold = [e for e in forgotten if e.in_hold is not None]
    assert len(forgotten) == int(315 * 0.03) and len(in_hold) == plan.IN_HOLD
    assert all(e.in_hold == 0 and e.at > lost[0].at for e in in_hold)  # Applied in its hold.
    reused = {e.name for e in made.executions if e.incarnation and not e.forget}
    assert not reused & {e.name for e in forgotten}  # A name is used again one way or the other.
    for again in forgotten:
        first = next(e for e in made.executions if e.name == again.name and not e.incarnation)
        assert first.action != "delete" and again.at >= first.at + 14.999
    never = plan.make(seed=5, executions=315, period=60, faults=48, unreplicated_share=None)
    assert never.unreplicated_at is None
    assert "redis-lost-writes" not in {f.kind for f in never.faults}


def test_refused_adopted_executions_fail_as_their_planted_pod_does() -> None:
    """Their Swarm's workers fail at once with the planted Pod's exit code: when the operator's
    own create comes first, its Pod is refused the same way; refused-created takes the others."""
    made = plan.make(seed=9, executions=315, period=60, faults=48, heavy_once=True)
    swarms = {s.slug: s for s in made.swarms}
    adopted = [e for e in made.executions if e.kind == "refused-adopted"]
    assert adopted
    for execution in adopted:
        swarm = swarms[execution.swarm]
        assert swarm.kind == "refused-adopted" and execution.exit_code == swarm.exit_code is not None
        assert swarm.annotations == pods.protocol_annotations(phase="Failed", exit_code=swarm.exit_code)
    assert all(
        swarms[e.swarm].kind != "refused-adopted" and e.exit_code is None
        for e in made.executions
        if e.kind != "refused-adopted"
    )


def test_the_gate_keeps_a_forget_out_of_a_hold_and_waits_for_one_under_way() -> None:
    gate = Gate()
    assert gate.enter()
    closing = threading.Thread(target=gate.close, kwargs={"timeout": 5.0})
    closing.start()
    time.sleep(0.1)
    assert closing.is_alive()  # It waits for the forget under way...
    gate.leave()
    closing.join(timeout=5)
    assert not closing.is_alive()
    assert not gate.enter()  # ...and lets no other in until it opens again.
    gate.open()
    assert gate.enter()
    with pytest.raises(RedisServerError):
        gate.close(timeout=0.1)


async def test_the_api_faults_wait_while_the_lost_writes_fault_holds_them_off() -> None:
    alone = Alone()
    order: list[str] = []

    async def api(name: str) -> None:
        async with alone.shared():
            order.append(f"{name} in")
            await asyncio.sleep(0.05)
        order.append(f"{name} out")

    async def lost_writes() -> None:
        await alone.take()
        order.append("alone")
        await asyncio.sleep(0.05)
        order.append("given back")
        await alone.give_back()

    first = asyncio.create_task(api("first"))
    await asyncio.sleep(0.01)
    taking = asyncio.create_task(lost_writes())
    await asyncio.sleep(0.01)
    later = asyncio.create_task(api("later"))
    await asyncio.gather(first, taking, later)
    assert order == ["first in", "first out", "alone", "given back", "later in", "later out"]
