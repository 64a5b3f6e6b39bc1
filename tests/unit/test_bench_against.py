"""``python -m tests.bench --against REV``: the plan that puts each run next to its twin on REV, the
working tree / REV ratios, the report's section, the option (pure; no cluster, no git)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from tests.bench import against, report, run
from tests.bench.__main__ import _plan, main, parser, plan_against
from tests.bench.run import Mode, Result, Scenario
from tests.unit.bench_results import fabricated

REVISION = against.Revision(commit="69636b1" + "0" * 33, short="69636b1", subject="Bench report")


def result(
    *,
    scenario: Scenario = "A",
    mode: Mode = "capture",
    n: int = 100,
    repeat: int = 0,
    wall: float = 10.0,
    cpu: float = 2.0,
    api: float = 13.0,
    latency: float = 1.0,
    last: float | None = 9.0,
    revision: str = "",
) -> Result:
    return fabricated(
        scenario=scenario,
        mode=mode,
        n=n,
        wall_seconds=wall,
        latency_record=[latency] * n if mode == "capture" else [],
        latency_gone=[latency] * n,
        settle_seconds=wall + 3,
        api_per_pod={"DELETE /api/v1/namespaces/{ns}/pods/{pod}": api},
        cpu_seconds=cpu,
        repeat=repeat,
        evidence_last=last,
        revision=revision,
    )


def test_each_run_of_the_working_tree_sits_next_to_its_twin_on_rev() -> None:
    plain = _plan([50, 2000], ["A", "B"], ["capture", "baseline"], 3)
    plan = plan_against(sizes=[50, 2000], scenarios=["A", "B"], wanted=["capture", "baseline"], repeats=3)
    assert len(plan) == 2 * len(plain)
    assert [item[:4] for item in plan[::2]] == plain  # The working tree's plan, in its order.
    for first, second in zip(plan[::2], plan[1::2], strict=True):
        assert first[:4] == second[:4]
        assert {first[4], second[4]} == {False, True}
    groups = [plan[i : i + 4] for i in range(0, len(plan), 4)]
    sides = [[item[4] for item in group] for group in groups[:2]]
    assert sides == [[False, True, True, False], [True, False, False, True]]  # ABBA, alternating.
    assert all(len({(i[0], i[2], i[3]) for i in group}) == 1 for group in groups)


def test_the_plan_without_rev_keeps_to_the_modes_asked_for() -> None:
    plan = plan_against(sizes=[50], scenarios=["A"], wanted=["capture"], repeats=2)
    assert [(mode, on_rev) for _, mode, _, _, on_rev in plan] == [
        ("capture", False),
        ("capture", True),
        ("capture", True),
        ("capture", False),
    ]


def test_the_option_is_off_by_default_and_names_a_revision() -> None:
    default = parser().parse_args([])
    assert default.against is None
    assert (default.sizes, default.scenarios, default.repeats) == ("100,500,2000", "A,B", 3)
    args = parser().parse_args(["--sizes", "50", "--repeats", "1", "--against", "69636b1"])
    assert (args.against, args.sizes, args.repeats) == ("69636b1", "50", 1)


def test_a_ratio_is_the_working_tree_over_rev_and_none_without_a_number() -> None:
    assert against.ratio(tree=6.0, rev=8.0) == 0.75
    assert against.ratio(tree=6.0, rev=0.0) is None
    assert against.ratio(tree=math.nan, rev=8.0) is None
    assert against.ratio(tree=6.0, rev=math.inf) is None


def test_pairs_match_scenario_n_mode_and_repeat_and_leave_unpaired_runs_out() -> None:
    results = [
        result(repeat=0, wall=8.0),
        result(repeat=0, wall=10.0, revision="69636b1"),
        result(repeat=1, wall=12.0),
        result(repeat=1, wall=10.0, revision="69636b1"),
        result(repeat=2, wall=5.0),  # REV's run of this repeat never finished: no pair.
        result(mode="baseline", repeat=0, wall=9.0, revision="69636b1"),
    ]
    found = against.pairs(results=results)
    assert list(found) == [("A", 100, "capture")]
    wall = next(f for f in against.FIGURES if f.name == "wall s")
    assert against.ratios(pairs_=found[("A", 100, "capture")], figure=wall) == [0.8, 1.2]
    assert against.spread([0.8, 1.2, 0.9]) == "0.90 (0.80-1.20, 3 pairs)"
    assert against.spread([0.8]) == "0.80 (1 pair)"
    assert against.spread([]) == "n/a"


def test_every_figure_is_a_ratio_and_a_run_without_a_last_evidence_has_none() -> None:
    tree = result(wall=5.0, cpu=1.0, api=6.5, latency=0.5, last=4.5)
    rev = result(wall=10.0, cpu=2.0, api=13.0, latency=1.0, last=9.0, revision="69636b1")
    by_name = {f.name: against.ratios(pairs_=[(tree, rev)], figure=f) for f in against.FIGURES}
    assert by_name == {
        "API req/Pod": [0.5],
        "CPU ms/Pod": [0.5],
        "evidence p50 s": [0.5],
        "evidence p99 s": [0.5],
        "evidence last s": [0.5],
        "wall s": [0.5],
        "Pods/s": [2.0],  # N / wall: higher is better.
    }
    last = next(f for f in against.FIGURES if f.name == "evidence last s")
    assert against.ratios(pairs_=[(replace(tree, evidence_last=None), rev)], figure=last) == []


def test_the_section_names_rev_and_gives_each_configuration_its_ratios_and_medians() -> None:
    results = [
        result(repeat=0, wall=8.0),
        result(repeat=0, wall=10.0, revision="69636b1"),
        result(mode="baseline", repeat=0, wall=8.0),
        result(mode="baseline", repeat=0, wall=8.0, revision="69636b1"),
    ]
    text = "\n".join(against.section(results=results, revision=REVISION))
    assert text.startswith("## Against 69636b1 Bench report\n")
    assert f"`{REVISION.commit}`" in text
    assert "| A | 100 | capture | 1.00 (1 pair) | 1.00 (1 pair) |" in text
    assert "| 0.80 (1 pair) | 1.25 (1 pair) |" in text  # Wall, then Pods/s.
    assert "| A | 100 | capture | 13.00 / 13.00 | 20.0 / 20.0 |" in text  # The medians.
    assert "A N=100: working tree 1.00 (1 run), REV 1.25 (1 run)." in text  # Capture/baseline.


def test_a_section_without_pairs_says_so() -> None:
    text = "\n".join(against.section(results=[result()], revision=REVISION))
    assert "| no pairs |" in text


def test_the_document_carries_the_section_after_the_results_and_only_when_given(tmp_path: Path) -> None:
    results = [result(mode=mode) for mode in ("capture", "baseline")]
    machine = report.machine()
    plain = report.document(results, machine=machine, command="make bench", elapsed=60.0, workdir=tmp_path)
    assert "## Against" not in plain
    section = against.section(results=results, revision=REVISION)
    text = report.document(
        results,
        machine=machine,
        command="make bench",
        elapsed=60.0,
        workdir=tmp_path,
        against=section,
        runs=4,
    )
    assert text.index("## Results") < text.index("## Against 69636b1") < text.index("## API requests")
    assert "planting, 2 runs)" in plain and "planting, 4 runs)" in text  # REV's runs counted too.


def test_the_report_gives_refusal_to_stored_capture_p50_p99_and_last(tmp_path: Path) -> None:
    results = [
        result(repeat=repeat, latency=latency, last=last)
        for repeat, (latency, last) in enumerate([(1.0, 9.0), (2.0, 11.0), (3.0, 10.0)])
    ]
    lines = report._evidence(results)
    assert lines[2] == (
        "| A | 100 | 2.00 (1.00-3.00, 3 runs) | 2.00 (1.00-3.00, 3 runs) | 10.0 (9.0-11.0, 3 runs) |"
    )
    assert "last 9.00s" in report.one_line(results[0])
    assert report.one_line(replace(results[0], revision="69636b1")).startswith("[69636b1] A capture")


def test_last_evidence_runs_from_the_first_refusal_to_the_last_evidence() -> None:
    refused = {"x0": 100.0, "x1": 101.0, "x2": 102.0}
    assert run._last(refused_at=refused, evidence_at={"x0": 103.0, "x1": 110.5, "other": 200.0}) == 10.5
    assert run._last(refused_at=refused, evidence_at={}) is None


def test_revs_operator_comes_first_on_the_path_and_from_its_own_controller(tmp_path: Path) -> None:
    assert run.python_path(source=tmp_path, existing=None) == str(tmp_path / "operator")
    assert run.python_path(source=tmp_path, existing="/x").split(":") == [str(tmp_path / "operator"), "/x"]
    assert run.controller_root(source=tmp_path, repo=run.REPO) == run.REPO  # REV has none: ours.
    (tmp_path / "tests" / "bench").mkdir(parents=True)
    (tmp_path / "tests" / "bench" / "controller.py").write_text("")
    assert run.controller_root(source=tmp_path, repo=run.REPO) == tmp_path


def test_with_tree_the_section_names_the_revision_that_ran_in_the_working_trees_place() -> None:
    tree = against.Revision(commit="98f7cf7" + "0" * 33, short="98f7cf7", subject="Folders")
    results = [
        result(repeat=0, wall=8.0),
        result(repeat=0, wall=10.0, revision="69636b1"),
        result(mode="baseline", repeat=0, wall=8.0),
        result(mode="baseline", repeat=0, wall=8.0, revision="69636b1"),
    ]
    text = "\n".join(against.section(results=results, revision=REVISION, tree=tree))
    assert text.startswith("## 98f7cf7 Folders, against 69636b1 Bench report\n")
    assert f"`{tree.commit}` ran in the working tree's place (`--tree`)" in text
    assert "ratio **98f7cf7 / REV**" in text
    assert "A N=100: 98f7cf7 1.00 (1 run), REV 1.25 (1 run)." in text
    assert "| 0.80 (1 pair) | 1.25 (1 pair) |" in text


def test_tree_needs_against() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--tree", "HEAD"])
    assert exited.value.code == 2
