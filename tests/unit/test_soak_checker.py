"""The soak's checker on fabricated histories: each rule finds what it must, and only that.

A violation the soak reports must be the operator's, so each rule is shown here to flag a history
that breaks it, to pass one that keeps it, and to say "could not check" where the history cannot
tell. The checker's independence from the operator is checked on its source.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.soak.checker import model, observe, rules
from tests.soak.checker.model import Capture, ExecutionHistory, OperatorLife, PodHistory, Probe

REPO = Path(__file__).resolve().parents[2]
MARKER = "0123456789abcdef"
OTHER = "fedcba9876543210"


def _failed(*, code: int = 78, phase: str = "Failed") -> dict[str, Any]:
    return {
        "phase": phase,
        "containerStatuses": [
            {"name": "worker", "state": {"terminated": {"exitCode": code, "reason": "Error"}}}
        ],
    }


def _pod(
    uid: str = "u1",
    *,
    status: Mapping[str, Any] | None = None,
    deleted: bool = True,
    vanished: bool = False,
    probe: Probe | None = None,
    execution: str = "x1",
    marker: str | None = MARKER,
) -> PodHistory:
    pod = PodHistory(
        uid=uid,
        name=f"swarm-worker-{execution}-1",
        slug="exit78",
        execution=execution,
        marker=marker,
        first_seen=0.0,
    )
    pod.observe(status=status if status is not None else _failed(), deleting=deleted, at=1.0)
    pod.deleted = deleted and not vanished
    pod.vanished = vanished
    if vanished:
        pod.deleting_at = None
    pod.probe = probe if probe is not None else (Probe(found=True, where="journal") if deleted else None)
    return pod


def _startup(*, log: str | None = None, code: int = 78) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "worker", "terminated": {"exitCode": code, "reason": "Error"}}
    if log is not None:
        container["log"] = log
    return {"phase": "Failed", "reason": "", "containers": [container]}


def _line(marker: str) -> str:
    return f"2026-12-01T10:00:00.000000000Z worker startup refused: soak-marker-{marker} pod p\n"


def _retained(*entries: Mapping[str, Any], execution: str = "x1") -> list[Capture]:
    raw = json.dumps({"execution": execution, "removed": {"pods": list(entries), "services": []}})
    return model.captures_from(where="retained", slug="exit78", execution=execution, raw=raw)


def _launch(uid: str, *, log: str, execution: str = "x1") -> list[Capture]:
    raw = json.dumps(
        {"pod": f"swarm-worker-{execution}-1", "uid": uid, "labels": {}, "startup": _startup(log=log)}
    )
    return model.captures_from(where="launch", slug="exit78", execution=execution, raw=raw)


def _findings(verdicts: rules.Verdicts) -> list[tuple[int, str]]:
    return [(f.rule, f.verdict) for f in verdicts.findings]


# -- what "refused" means ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"phase": "Failed"}, True),
        (_failed(code=1, phase="Running"), True),
        (_failed(code=0, phase="Succeeded"), False),
        ({"phase": "Running", "containerStatuses": [{"name": "w", "state": {"running": {}}}]}, False),
        (
            {
                "phase": "Pending",
                "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 2}}}],
            },
            True,
        ),
        ({"phase": "Pending", "containerStatuses": [{"name": "w", "state": {"terminated": {}}}]}, True),
        ({}, False),
    ],
)
def test_refused_is_the_specs_definition(status: dict[str, Any], expected: bool) -> None:
    assert model.refused(status) is expected


def test_a_pod_once_seen_refused_stays_refused() -> None:
    pod = _pod(status=_failed())
    pod.observe(status={"phase": "Running"}, deleting=True, at=2.0)
    assert pod.refused


# -- rule 1 and 2 --------------------------------------------------------------------------------


def test_a_refused_pod_with_its_own_capture_passes() -> None:
    pods = {"u1": _pod()}
    captures = _retained(
        {"name": "p", "uid": "u1", "outcome": "deleted", "startup": _startup(log=_line(MARKER))}
    )
    verdicts = rules.judge_captures(pods, captures)
    assert verdicts.findings == []
    assert verdicts.counts["refused pods with their own capture"] == 1
    assert verdicts.counts["captures verified by marker"] == 1


def test_a_refused_pod_deleted_without_a_capture_is_a_violation() -> None:
    verdicts = rules.judge_captures({"u1": _pod()}, [])
    assert _findings(verdicts) == [(1, "violated")]


def test_the_lifecycle_race_a_retained_entry_without_the_capture_is_a_violation() -> None:
    """A capture saved in the journal, then overwritten by a pass that found the Pod absent."""
    captures = _retained({"name": "p", "uid": "u1", "outcome": "absent"})
    verdicts = rules.judge_captures({"u1": _pod(probe=Probe(found=True, where="journal"))}, captures)
    assert _findings(verdicts) == [(1, "violated")]
    assert rules.judge_deletes({"u1": _pod(probe=Probe(found=True, where="journal"))}).findings == []


def test_a_capture_carrying_another_pods_marker_is_a_violation() -> None:
    captures = _retained(
        {"name": "p", "uid": "u1", "outcome": "deleted", "startup": _startup(log=_line(OTHER))}
    )
    verdicts = rules.judge_captures({"u1": _pod()}, captures)
    assert _findings(verdicts) == [(1, "violated")]
    assert "another Pod's marker" in verdicts.findings[0].detail


def test_a_capture_under_another_execution_is_a_violation() -> None:
    captures = _launch("u1", log=_line(MARKER), execution="x2")
    verdicts = rules.judge_captures({"u1": _pod(execution="x1")}, captures)
    assert _findings(verdicts) == [(1, "violated")]


def test_a_name_used_again_whose_second_pod_finds_the_first_record_is_a_violation() -> None:
    """HSETNX keeps the first Pod's launch capture: the second refused Pod has none of its own."""
    pods = {"u1": _pod("u1"), "u2": _pod("u2", marker=OTHER)}
    verdicts = rules.judge_captures(pods, _launch("u1", log=_line(MARKER)))
    assert [(f.rule, f.verdict, f.subject.split("uid ")[1][:2]) for f in verdicts.findings] == [
        (1, "violated", "u2")
    ]


def test_a_degraded_capture_without_logs_is_the_specs_answer() -> None:
    captures = _retained(
        {"name": "p", "uid": "u1", "outcome": "deleted", "startup": _startup(), "log_reads": 3}
    )
    verdicts = rules.judge_captures({"u1": _pod()}, captures)
    assert verdicts.findings == []
    assert verdicts.counts["captures verified without logs (exit reasons only)"] == 1


def test_a_log_without_any_marker_could_not_be_checked() -> None:
    captures = _retained({"name": "p", "uid": "u1", "outcome": "deleted", "startup": _startup(log="")})
    assert _findings(rules.judge_captures({"u1": _pod()}, captures)) == [(1, "unchecked")]


def test_a_pod_that_never_ran_is_checked_by_its_uid_alone() -> None:
    waiting = {
        "phase": "Failed",
        "reason": "DeadlineExceeded",
        "containerStatuses": [{"name": "worker", "state": {"waiting": {"reason": "ImagePullBackOff"}}}],
    }
    startup = {"phase": "Failed", "reason": "DeadlineExceeded", "containers": []}
    captures = _retained({"name": "p", "uid": "u1", "outcome": "deleted", "startup": startup})
    verdicts = rules.judge_captures({"u1": _pod(status=waiting)}, captures)
    assert verdicts.findings == []
    assert verdicts.counts["refused pods with their own capture"] == 1


def test_launch_and_retained_captures_of_one_pod_are_counted_not_judged() -> None:
    captures = [
        *_launch("u1", log=_line(MARKER)),
        *_retained({"name": "p", "uid": "u1", "outcome": "deleted", "startup": _startup(log=_line(MARKER))}),
    ]
    verdicts = rules.judge_captures({"u1": _pod()}, captures)
    assert verdicts.findings == []
    assert verdicts.counts["captured at launch and again by cleanup (launch kept the Pod)"] == 1


def test_one_pod_twice_in_one_retained_record_is_a_violation() -> None:
    entry = {"name": "p", "uid": "u1", "outcome": "deleted", "startup": _startup(log=_line(MARKER))}
    assert _findings(rules.judge_captures({"u1": _pod()}, _retained(entry, entry))) == [(1, "violated")]


def test_a_capture_of_a_pod_that_was_not_refused_is_a_violation() -> None:
    succeeded = _failed(code=0, phase="Succeeded")
    captures = _retained({"name": "p", "uid": "u1", "outcome": "deleted", "startup": _startup(code=0)})
    assert _findings(rules.judge_captures({"u1": _pod(status=succeeded)}, captures)) == [(2, "violated")]


def test_a_pod_removed_without_a_capture_when_not_refused_passes() -> None:
    succeeded = _failed(code=0, phase="Succeeded")
    captures = _retained({"name": "p", "uid": "u1", "outcome": "deleted"})
    assert rules.judge_captures({"u1": _pod(status=succeeded)}, captures).findings == []


def test_a_pod_gone_while_the_watch_was_broken_could_not_be_checked() -> None:
    running = {"phase": "Running", "containerStatuses": [{"name": "worker", "state": {"running": {}}}]}
    pod = _pod(status=running, vanished=True)
    captures = _retained(
        {"name": "p", "uid": "u1", "outcome": "deleted", "startup": _startup(log=_line(MARKER))}
    )
    assert _findings(rules.judge_captures({"u1": pod}, captures)) == [(1, "unchecked"), (2, "unchecked")]


def test_a_capture_of_a_pod_never_seen_could_not_be_checked() -> None:
    captures = _retained(
        {"name": "p", "uid": "u9", "outcome": "deleted", "startup": _startup(log=_line(MARKER))}
    )
    assert _findings(rules.judge_captures({}, captures)) == [(2, "unchecked")]


def test_redis_unreadable_at_the_end_could_not_be_checked() -> None:
    assert _findings(rules.judge_captures({"u1": _pod()}, [], redis_read=False)) == [(1, "unchecked")]


def test_records_that_do_not_parse_are_refused() -> None:
    with pytest.raises(model.RecordError):
        model.captures_from(where="launch", slug="s", execution="x", raw="{not json")
    with pytest.raises(model.RecordError):
        model.captures_from(where="retained", slug="s", execution="x", raw='{"removed": {"pods": [{}]}}')


def test_a_journal_entry_holds_pinned_and_removed_captures() -> None:
    raw = json.dumps(
        {
            "execution": "x1",
            "generation": 1,
            "pinned": {
                "pods": [{"name": "p", "uid": "u1", "sent": True, "startup": _startup(log=_line(MARKER))}]
            },
            "removed": {"pods": [{"name": "q", "uid": "u2", "outcome": "deleted"}]},
        }
    )
    found = model.captures_from(where="journal", slug="exit78", execution="x1", raw=raw)
    assert [(c.uid, c.startup is not None, c.markers()) for c in found] == [
        ("u1", True, {MARKER}),
        ("u2", False, set()),
    ]


# -- rule 3 --------------------------------------------------------------------------------------


def test_a_delete_seen_before_the_capture_was_stored_is_a_violation() -> None:
    pods = {"u1": _pod(probe=Probe(found=False, detail="records held: none"))}
    assert _findings(rules.judge_deletes(pods)) == [(3, "violated")]


def test_a_probe_that_found_redis_down_could_not_be_checked() -> None:
    pods = {"u1": _pod(probe=Probe(found=None, detail="ConnectionError"))}
    assert _findings(rules.judge_deletes(pods)) == [(3, "unchecked")]


def test_a_delete_not_seen_could_not_be_checked() -> None:
    assert _findings(rules.judge_deletes({"u1": _pod(vanished=True)})) == [(3, "unchecked")]


# -- rule 4 --------------------------------------------------------------------------------------


def test_pods_and_journal_entries_left_are_violations() -> None:
    left = _pod(deleted=False)
    verdicts = rules.judge_leftovers({"u1": left, "u2": _pod("u2")}, [("exit78", "x3")])
    assert _findings(verdicts) == [(4, "violated"), (4, "violated")]


# -- rule 5 --------------------------------------------------------------------------------------


def _execution(name: str, **fields: Any) -> ExecutionHistory:
    return ExecutionHistory(uid=f"uid-{name}", name=name, **fields)


def test_convergence_within_the_bound_passes_and_late_or_never_fails() -> None:
    executions = {
        "a": _execution("a", phase="Done", converged_at=5.0),
        "b": _execution("b", phase="Done", converged_at=200.0),
        "c": _execution("c", phase="Running"),
        "d": _execution("d", phase="Done", converged_at=3.0, deleting_at=4.0, gone_at=50.0),
        "e": _execution("e", phase="Cleaning", deleting_at=4.0),
        "f": _execution("f", phase="Invalid", converged_at=2.0),
    }
    verdicts = rules.judge_convergence(executions, faults_end=10.0, bound=60.0)
    assert sorted(f.subject.split()[1] for f in verdicts.violations) == ["b", "c", "e"]
    assert verdicts.counts["seconds to converge after the faults stopped"] == 190


# -- rule 6 --------------------------------------------------------------------------------------


def test_operators_memory_exits_and_tasks() -> None:
    lives = [
        OperatorLife(
            replica="a", pid=1, peak_rss_kib=200 * 1024, samples=3, killed_by_soak=True, exit_code=-9
        ),
        OperatorLife(replica="a", pid=2, peak_rss_kib=400 * 1024, samples=3),
        OperatorLife(replica="b", pid=3, peak_rss_kib=100 * 1024, samples=3, exit_code=1),
        OperatorLife(replica="b", pid=4, samples=2, scrapes=2, tasks_up={"passes": 1.0, "expiry": 0.0}),
    ]
    verdicts = rules.judge_operators(lives, rss_bound_mib=300)
    assert [(f.subject, f.detail.split()[0]) for f in verdicts.violations] == [
        ("operator a (pid 2)", "VmHWM"),
        ("operator b (pid 3)", "exited"),
        ("operator b (pid 4)", "background"),
    ]


def test_task_metrics_that_do_not_exist_could_not_be_checked() -> None:
    lives = [OperatorLife(replica="a", pid=1, peak_rss_kib=1024, samples=2, scrapes=2)]
    assert _findings(rules.judge_operators(lives, rss_bound_mib=300)) == [(6, "unchecked")]


# -- independence --------------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _module_file(name: str) -> Path | None:
    base = REPO.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def test_the_checker_imports_nothing_from_the_operator() -> None:
    """Its modules, and every module of this repository they import (transitively, package
    ``__init__`` files included), never import ``agentihooks_swarm``."""
    checker = REPO / "tests" / "soak" / "checker"
    pending = sorted(checker.glob("*.py"))
    seen: set[Path] = set()
    offenders = []
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path):
            if name == "agentihooks_swarm" or name.startswith("agentihooks_swarm."):
                offenders.append(f"{path.relative_to(REPO)} imports {name}")
            if name.split(".")[0] == "tests":
                parts = name.split(".")
                for depth in range(1, len(parts) + 1):
                    found = _module_file(".".join(parts[:depth]))
                    if found is not None:
                        pending.append(found)
    assert len(seen) > len(list(checker.glob("*.py"))), "the walk did not follow the checker's imports"
    assert offenders == []


def test_a_planted_pod_whose_execution_never_launched_was_never_the_operators() -> None:
    left = _pod(deleted=False)
    executions = {
        "e1": ExecutionHistory(uid="e1", name="x1", gone_at=3.0),
        "e2": ExecutionHistory(uid="e2", name="x2", launched=True, phase="Done"),
    }
    never = rules.judge_leftovers({"u1": left}, [], planted={"u1": "e1"}, executions=executions)
    assert _findings(never) == [(4, "unchecked")]
    taken = rules.judge_leftovers({"u1": left}, [], planted={"u1": "e2"}, executions=executions)
    assert _findings(taken) == [(4, "violated")]


def test_a_pod_that_fails_only_once_deleted_was_not_a_refused_pod_deleted() -> None:
    """Deleting a running worker stops it (a kubelet's SIGTERM; kwok's late terminate Stage):
    the status after the delete is its consequence, not what the operator deleted."""
    running = {"phase": "Running", "containerStatuses": [{"name": "worker", "state": {"running": {}}}]}
    pod = PodHistory(uid="u1", name="p", slug="exit78", execution="x1", marker=MARKER, first_seen=0.0)
    pod.observe(status=running, deleting=False, at=1.0)
    pod.observe(status=running, deleting=True, at=2.0)  # deletionTimestamp set while running
    pod.observe(status=_failed(code=143), deleting=True, at=2.5)
    pod.deleted = True
    captures = _retained({"name": "p", "uid": "u1", "outcome": "deleted"})
    assert not pod.refused and pod.refused_after_delete
    verdicts = rules.judge_captures({"u1": pod}, captures)
    assert verdicts.findings == []
    assert verdicts.counts["pods that failed only once deleted (stopped by the delete)"] == 1
    assert rules.judge_deletes({"u1": pod}).findings == []


def test_a_pod_that_failed_before_its_delete_was_refused_and_says_when() -> None:
    running = {"phase": "Running", "containerStatuses": [{"name": "worker", "state": {"running": {}}}]}
    pod = PodHistory(uid="u1", name="p", slug="exit78", execution="x1", marker=MARKER, first_seen=0.0)
    pod.observe(status=running, deleting=False, at=1.0)
    pod.observe(status=_failed(), deleting=False, at=1.5)
    pod.observe(status=_failed(), deleting=True, at=2.0)
    pod.deleted = True
    verdicts = rules.judge_captures({"u1": pod}, _retained({"name": "p", "uid": "u1", "outcome": "deleted"}))
    assert _findings(verdicts) == [(1, "violated")]
    assert "refused 0.5s before its delete was seen" in verdicts.findings[0].detail


def test_a_capture_of_a_pod_that_failed_once_deleted_is_not_a_violation() -> None:
    running = {"phase": "Running", "containerStatuses": [{"name": "worker", "state": {"running": {}}}]}
    pod = PodHistory(uid="u1", name="p", slug="exit78", execution="x1", marker=MARKER, first_seen=0.0)
    pod.observe(status=running, deleting=True, at=1.0)
    pod.observe(status=_failed(code=143), deleting=True, at=1.5)
    pod.deleted = True
    entry = {"name": "p", "uid": "u1", "outcome": "deleted", "startup": _startup(log=_line(MARKER), code=143)}
    assert rules.judge_captures({"u1": pod}, _retained(entry)).findings == []


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        (["master", 120, [["127.0.0.1", "6380", "120"]]], None),
        ([b"master", 120, [[b"127.0.0.1", b"6380", b"120"]]], None),
        (["master", 0, []], "a primary with no replica in sync"),
        ([b"slave", "127.0.0.1", 6379, "connected", 120], "a slave"),
        (["sentinel", ["mymaster"]], "a sentinel"),
        ([], "a server that named no role"),
    ],
)
def test_the_probe_reads_only_a_primary_with_a_replica_in_sync(role: list[Any], expected: str | None) -> None:
    """``ROLE`` lists only replicas in sync; a killed primary started again lists none."""
    assert observe.not_a_primary(role) == expected
