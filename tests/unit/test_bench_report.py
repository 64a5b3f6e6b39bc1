"""The bench's plan and report: repeats interleaved with their baseline, ratios of neighbouring runs,
medians and spreads (pure; no cluster)."""

from __future__ import annotations

from pathlib import Path

from tests.bench import report
from tests.bench.__main__ import _plan
from tests.bench.run import Mode, Result, Scenario
from tests.unit.bench_results import fabricated


def result(scenario: Scenario, mode: Mode, n: int, repeat: int, wall: float) -> Result:
    return fabricated(
        scenario=scenario,
        mode=mode,
        n=n,
        wall_seconds=wall,
        latency_record=[0.5] * n if mode == "capture" else [],
        latency_gone=[0.4] * n,
        settle_seconds=wall + 3,
        api_per_pod={"DELETE /api/v1/namespaces/{ns}/pods/{pod}": 1.0},
        redis_per_pod={"hsetnx": 1.0},
        record_bytes=500.0,
        redis_used_memory=1 << 20,
        redis_memory_delta=1000 * n,
        peak_rss_mib=120.0 + repeat,
        cpu_seconds=0.01 * n,
        repeat=repeat,
    )


def test_each_configuration_runs_three_times_next_to_its_baseline() -> None:
    plan = _plan([100, 2000], ["A", "B"], ["capture", "baseline"], 3)
    assert len(plan) == 2 * 2 * 2 * 3
    pairs = [plan[i : i + 2] for i in range(0, len(plan), 2)]
    for first, second in pairs:  # Each capture run sits next to its own baseline run.
        assert (first[0], first[2], first[3]) == (second[0], second[2], second[3])
        assert {first[1], second[1]} == {"capture", "baseline"}
    assert [p[0][1] for p in pairs[:4]] == ["capture", "baseline", "capture", "baseline"]


def test_ratios_pair_runs_of_the_same_repeat_and_the_median_is_judged() -> None:
    results = [
        result("A", "capture", 2000, 0, 11.0),
        result("A", "baseline", 2000, 0, 10.0),
        result("A", "capture", 2000, 1, 30.0),
        result("A", "baseline", 2000, 1, 20.0),
        result("A", "capture", 2000, 2, 10.0),
        result("A", "baseline", 2000, 2, 10.0),
    ]
    assert report.ratios(results, "A", 2000) == [1.1, 1.5, 1.0]
    assert report.spread(report.ratios(results, "A", 2000)) == "1.10 (1.00-1.50, 3 runs)"
    [capture, baseline] = report.representatives(results)
    assert (capture.repeat, capture.wall_seconds) == (0, 11.0)  # The median wall time of three.
    assert baseline.wall_seconds == 10.0
    targets = "\n".join(report._targets(results))
    assert "1.10 (1.00-1.50, 3 runs)" in targets
    assert "| capture/baseline wall-time ratio ≤ 1.15" in targets


def test_the_document_has_the_medians_and_every_run(tmp_path: Path) -> None:
    results = [
        result(scenario, mode, 100, repeat, 5.0 + repeat)
        for scenario in ("A", "B")
        for repeat in range(3)
        for mode in ("capture", "baseline")
    ]
    machine = report.machine()
    text = report.document(results, machine=machine, command="make bench", elapsed=60.0, workdir=tmp_path)
    assert "Each configuration ran 3 times" in text
    assert "6.0 (5.0-7.0, 3 runs)" in text  # Wall s of a configuration: median (min-max).
    for run, wall in ((1, "5.0"), (2, "6.0"), (3, "7.0")):  # Every run, numbered.
        assert f"| A | 100 | capture | {run} | {wall} |" in text
