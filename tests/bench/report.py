"""Figures from the runs: the console table, ``docs/benchmarks.md`` and ``docs/benchmarks.png``."""

from __future__ import annotations

import datetime
import importlib
import math
import os
import platform
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from tests.bench.run import CHART_DEFAULTS, CREATE_PARALLELISM, QUIET_SECONDS, RUN_FOR, Result, Scenario
from tests.support.cluster import KUBERNETES_VERSION

NOTES: Final = Path(__file__).with_name("notes.md")

# -- targets --------------------------------------------------------------------------------------

RATIO_TARGET: Final = 1.15
THROUGHPUT_TARGET: Final = 50.0
CPU_TARGET_MS: Final = 8.0
CPU_TARGET: Final = ("A", 2000)
RSS_TARGET_MIB: Final = 150.0
RSS_TARGET_N: Final = 2000

#: What the spec needs per refused Pod (one terminated container): re-read, log read, delete.
MINIMUM: Final = {
    "GET /api/v1/namespaces/{ns}/pods/{pod}": 1.0,
    "GET /api/v1/namespaces/{ns}/pods/{pod}/log": 1.0,
    "DELETE /api/v1/namespaces/{ns}/pods/{pod}": 1.0,
}
LOG_READ: Final = "GET /api/v1/namespaces/{ns}/pods/{pod}/log"

_POD = "/api/v1/namespaces/{ns}/pods"
_EXECUTION = "/apis/swarm.agentihooks.io/v1alpha1/namespaces/{ns}/executions/{execution}"
#: Why each request is made, in both scenarios unless :data:`WHY_IN` says otherwise for one.
WHY: Final[dict[str, str]] = {
    f"DELETE {_POD}/{{pod}}": "minimum: the delete by pinned UID",
    f"GET {_POD}/{{pod}}/log": "minimum: the log of the one terminated container",
    f"PATCH {_POD}/{{pod}}": (
        "the release of the evidence finalizer (`swarm.agentihooks.io/evidence`, in every worker "
        "Pod's create body): after the delete, one JSON patch testing the Pod's UID and the "
        "finalizer's index removes it, and only then is the Pod gone. It kept the Pod readable "
        "(terminating, not gone) until its evidence was stored, whoever deleted it"
    ),
    f"GET {_EXECUTION}": (
        "the launch reads the Execution's spec when the table of Executions did not keep it: it "
        "keeps one of up to about 4 KiB until the launch (a task may be 1 MB, and thousands may "
        "wait); the bench's tasks are smaller, so this shows only in a run against an older tree"
    ),
    "GET /api/v1/namespaces/{ns}/secrets/{name}": (
        "per Swarm, not per Pod: the Swarm's worker credential Secret (docs/workers.md), ensured "
        "before a launch once per interval and by the leader's pass; the launches that start "
        "together before the first ensure is done each read it (at most one per step worker). In "
        "A, counted from the operator's start with every launch at once, a few reads / N"
    ),
    "POST /api/v1/namespaces/{ns}/secrets": (
        "per Swarm, not per Pod: the Swarm's worker credential Secret is created once"
    ),
    "PATCH /apis/swarm.agentihooks.io/v1alpha1/namespaces/{ns}/swarms/{swarm}/status": (
        "per Swarm, not per Pod: the Swarm's `WorkerCredential` condition, and its status "
        "(refusal summary, budget) when it changed"
    ),
    f"PATCH {_EXECUTION}": (
        "the finalizer an earlier version put on the Execution, removed once its attempt is Done "
        "and cleaned up (with the Execution's UID and resourceVersion as preconditions); this "
        "version puts none on, since the worker Pod's evidence finalizer keeps its evidence"
    ),
    "GET /apis/swarm.agentihooks.io/v1alpha1/namespaces/{ns}/swarms/{swarm}": (
        "the launch reads the Swarm: its registration decides the hand, its template the Pod"
    ),
    f"GET {_POD}?labelSelector={{attempt}}": (
        "final cleanup lists the attempt's Pods to pin them only while the worker Pods' watch is "
        "listing again, or for a hand an older version recorded without the Pod's UID; otherwise "
        "it pins the Pod the hand names (docs/architecture.md, what the watches answer)"
    ),
    "GET /apis/swarm.agentihooks.io/v1alpha1/namespaces/{ns}/swarms": (
        "per operator, not per Pod: the leader's Swarm status pass lists the Swarms once per interval"
    ),
    "GET /api/v1/namespaces/{ns}/services?labelSelector={attempt}": (
        "final cleanup pins the attempt's Services (the terminal Service, when the template has a port)"
    ),
    f"GET {_POD}?fieldSelector=metadata.name={{name}}": (
        "a 404 on a read or delete is believed only when a list agrees (rare: a race with kwok)"
    ),
    "POST /api/v1/namespaces/{ns}/configmaps": "the hand: the grant ConfigMap (owned by the Pod)",
    "GET /api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.uid={uid}": (
        "the capture's Events (issue 12, additive), listed by the Pod's UID only while the "
        "operator's Events index is out of sync (its first list, a broken watch). The costliest "
        "request at scale: no index serves the selector, so the API server reads every Event of "
        "the namespace (see the notes)"
    ),
}
WHY_IN: Final[dict[tuple[Scenario, str], str]] = {
    ("A", f"GET {_POD}/{{pod}}"): (
        "the spec's re-read (launch removal, step 1). The planted Pod is adopted as the worker "
        "Pods' watch saw it (owned by its Execution, not being deleted): no create answering 409 "
        "and no adoption read, unless the watch had not listed it yet"
    ),
    ("B", f"GET {_POD}/{{pod}}"): (
        "the finality check reads the Pod only when the watch cannot answer: a handed worker's "
        "Pod the watch saw Failed is judged and captured from the watch's copy (kept once "
        "terminal), and one running, or not started within its startup deadline, needs no read. "
        "A read here is a copy the watch had not kept, or one refused at the delete (its "
        "resourceVersion was not the latest) and read again"
    ),
    ("A", f"PATCH {_EXECUTION}/status"): (
        "one per step: the attempt is final at once, so one step launches (adopts), captures, "
        "cleans up and writes the hand result, the capture's outcome and phase Done together"
    ),
    ("B", f"PATCH {_EXECUTION}/status"): (
        "the launch step's hand result (phase Running, hand, waitingFor, conditions); then the step "
        "that finds the worker Failed writes the final outcome (phase Done, cleanup, finishedAt). "
        "A step that finds the worker still running writes nothing"
    ),
    ("A", f"POST {_POD}"): (
        "the launch creates the worker Pod when the watch has not seen one under its name (the "
        "planted Pod, as a launch that stopped before recording its hand left it, then answers 409 "
        "AlreadyExists and is read back)"
    ),
    ("B", f"POST {_POD}"): "the launch creates the worker Pod",
    ("A", "POST /api/v1/namespaces/{ns}/events"): (
        "the Execution's Events (docs/concepts.md), posted after the step's status: StartupRefused "
        "with the capture (it names the refusal and quotes the captured log line; HandRefused in "
        "the baseline, which captures nothing); its message also says the cleanup finished, in "
        "the same step"
    ),
    (
        "B",
        "POST /api/v1/namespaces/{ns}/events",
    ): (
        "the Execution's Events (docs/concepts.md), posted after each step's status: Handed, then "
        "AttemptFinal, whose message also says the cleanup finished, in the same step"
    ),
}


def why(scenario: Scenario, call: str) -> str:
    """The reason for a request, or a flag that the bench saw one nobody explained."""
    return WHY_IN.get((scenario, call)) or WHY.get(call) or "**not explained**"


#: Why a capture run can show a fraction of a call more than its baseline run.
FRACTIONAL: Final = (
    " (a timing difference between the two runs: how many steps came before the Pod failed; "
    "the capture makes no such call)"
)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def latencies(result: Result) -> list[float]:
    """The headline latency: refusal to record stored (capture), refusal to Pod gone (baseline)."""
    return result.latency_record if result.mode == "capture" else result.latency_gone


def machine() -> dict[str, str]:
    info = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "unknown")
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    total_kib = next((int(line.split()[1]) for line in meminfo if line.startswith("MemTotal")), 0)
    kopf = importlib.import_module("kopf")
    try:
        redis_version = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, check=False
        ).stdout.split()[2]
    except (OSError, IndexError):
        redis_version = "unknown"
    return {
        "nproc": subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip(),
        "memory": f"{total_kib / 1024 / 1024:.1f} GiB (MemTotal {total_kib} kB)",
        "cpu": cpu,
        "python": platform.python_version(),
        "kopf": str(getattr(kopf, "__version__", "unknown")),
        "kubernetes-asyncio": importlib.import_module("kubernetes_asyncio").__version__,
        "redis-server": redis_version.removeprefix("v="),
        "kubernetes": KUBERNETES_VERSION,
        "load": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _seconds(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def one_line(result: Result) -> str:
    lat = latencies(result)
    last = "n/a" if result.evidence_last is None else f"{result.evidence_last:.2f}"
    return (
        (f"[{result.revision}] " if result.revision else "")
        + f"{result.scenario} {result.mode:<8} N={result.n:<5} wall {result.wall_seconds:6.1f}s "
        f"{result.throughput:6.1f} pods/s p50/p95/p99 {_seconds(percentile(lat, 50))}/"
        f"{_seconds(percentile(lat, 95))}/{_seconds(percentile(lat, 99))}s last {last}s "
        f"RSS {result.peak_rss_mib:.0f} MiB "
        f"CPU {result.cpu_seconds:.1f}s API/pod {sum(result.api_per_pod.values()):.2f} "
        f"Redis cmds/pod {sum(result.redis_per_pod.values()):.2f}"
        + (f" [{'; '.join(result.notes)}]" if result.notes else "")
    )


def _ratio(results: Sequence[Result], result: Result) -> float | None:
    """A capture run's wall time over its neighbouring baseline run's (the same repeat)."""
    if result.mode != "capture":
        return None
    other = next(
        (
            r
            for r in results
            if r.key == (result.scenario, result.n, "baseline") and r.repeat == result.repeat
        ),
        None,
    )
    return result.wall_seconds / other.wall_seconds if other and other.wall_seconds > 0 else None


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    """``median (min-max, n runs)``."""
    if not values:
        return "n/a"
    if len(values) == 1:
        return fmt.format(values[0]) + " (1 run)"
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return f"{fmt.format(median(values))} ({low}-{high}, {len(values)} runs)"


def ratios(results: Sequence[Result], scenario: str, n: int) -> list[float]:
    """Every capture/baseline wall-time ratio of one configuration, one per repeat."""
    found = (_ratio(results, r) for r in results if r.key == (scenario, n, "capture"))
    return [x for x in found if x is not None]


def runs_of(results: Sequence[Result], key: tuple[Scenario, int, str]) -> list[Result]:
    return [r for r in results if r.key == key]


def representatives(results: Sequence[Result]) -> list[Result]:
    """One run per configuration, the one with the median wall time: the detail tables use it."""
    chosen = []
    for key in dict.fromkeys(r.key for r in results):
        runs = sorted(runs_of(results, key), key=lambda r: r.wall_seconds)
        chosen.append(runs[(len(runs) - 1) // 2])
    return chosen


def _medians(results: Sequence[Result]) -> list[str]:
    """Median and spread of each configuration's runs, and of its capture/baseline ratios."""
    lines = _header(
        ["Scenario", "N", "Mode", "Wall s", "Pods/s", "Wall c/b", "p99 s", "CPU ms/Pod", "Peak RSS MiB"],
        "lrl" + "r" * 6,
    )
    for key in dict.fromkeys(r.key for r in results):
        runs = runs_of(results, key)
        scenario, n, mode = key
        lines.append(
            _row(
                [
                    scenario,
                    n,
                    mode,
                    spread([r.wall_seconds for r in runs], "{:.1f}"),
                    spread([r.throughput for r in runs], "{:.1f}"),
                    spread(ratios(results, scenario, n)) if mode == "capture" else "",
                    spread([percentile(latencies(r), 99) for r in runs]),
                    spread([1000 * r.cpu_seconds / r.n for r in runs], "{:.1f}"),
                    spread([r.peak_rss_mib for r in runs], "{:.0f}"),
                ]
            )
        )
    return lines


def _evidence(results: Sequence[Result]) -> list[str]:
    """Refusal to stored capture (capture runs): p50, p99 and last, median and spread over the runs."""
    lines = _header(["Scenario", "N", "p50 s", "p99 s", "last s"], "lrrrr")
    for key in dict.fromkeys(r.key for r in results if r.mode == "capture"):
        runs = runs_of(results, key)
        lasts = [r.evidence_last for r in runs if r.evidence_last is not None]
        lines.append(
            _row(
                [
                    key[0],
                    key[1],
                    spread([percentile(r.latency_record, 50) for r in runs]),
                    spread([percentile(r.latency_record, 99) for r in runs]),
                    spread(lasts, "{:.1f}"),
                ]
            )
        )
    return lines


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _header(names: Sequence[str], align: str) -> list[str]:
    """A Markdown table header; ``align`` has an ``l`` or ``r`` per column."""
    return [_row(names), _row(["---:" if a == "r" else "---" for a in align])]


def table(results: Sequence[Result]) -> str:
    """The main table as Markdown (also printed to the console)."""
    rows = _header(
        [
            "Scenario", "N", "Mode", "Run", "Wall s", "Pods/s", "Wall c/b", "p50 s", "p95 s", "p99 s",
            "API req/Pod", "Redis cmd/Pod", "Record bytes", "Redis used_memory", "Peak RSS MiB", "CPU s",
        ],
        "lrl" + "r" * 13,
    )  # fmt: skip
    for r in results:
        lat = latencies(r)
        ratio = _ratio(results, r)
        rows.append(
            _row(
                [
                    r.scenario,
                    r.n,
                    r.mode + ("" if r.complete else " ⚠ incomplete"),
                    r.repeat + 1,
                    f"{r.wall_seconds:.1f}",
                    f"{r.throughput:.1f}",
                    f"{ratio:.2f}" if ratio is not None else "",
                    _seconds(percentile(lat, 50)),
                    _seconds(percentile(lat, 95)),
                    _seconds(percentile(lat, 99)),
                    f"{sum(r.api_per_pod.values()):.2f}",
                    f"{sum(r.redis_per_pod.values()):.2f}",
                    f"{r.record_bytes:.0f}",
                    f"{r.redis_used_memory / 1024 / 1024:.2f} MiB",
                    f"{r.peak_rss_mib:.0f}",
                    f"{r.cpu_seconds:.1f}",
                ]
            )
        )
    return "\n".join(rows)


# -- the plot -------------------------------------------------------------------------------------


def plot(results: Sequence[Result], path: Path) -> None:
    """Latency percentiles and throughput against N, capture against baseline, per scenario."""
    # matplotlib is the optional `bench` extra: imported by name so that `make lint` (without the
    # extra) needs no stubs for it.
    matplotlib: Any = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    pyplot: Any = importlib.import_module("matplotlib.pyplot")
    scenarios = sorted({r.scenario for r in results})
    sizes = sorted({r.n for r in results})
    titles = {"A": "A: refused at launch", "B": "B: failed after the hand (final cleanup)"}
    figure, axes = pyplot.subplots(len(scenarios), 2, figsize=(13, 4.8 * len(scenarios)), squeeze=False)
    for row, scenario in enumerate(scenarios):
        left, right = axes[row]
        for mode, style, marker in (("capture", "-", "o"), ("baseline", "--", "s")):
            chosen = sorted(
                (r for r in results if r.scenario == scenario and r.mode == mode), key=lambda r: r.n
            )
            if not chosen:
                continue
            xs = [r.n for r in chosen]
            for q, colour in ((50, "tab:blue"), (95, "tab:orange"), (99, "tab:red")):
                ys = [percentile(latencies(r), q) for r in chosen]
                left.plot(xs, ys, style, marker=marker, color=colour, label=f"{mode} p{q}")
            colour = "tab:green" if mode == "capture" else "tab:gray"
            right.plot(xs, [r.throughput for r in chosen], style, marker=marker, color=colour, label=mode)
        for axis in (left, right):
            axis.set_xscale("log")
            axis.set_xticks(sizes, labels=[str(n) for n in sizes])
            axis.minorticks_off()
            axis.set_xlabel("N (refused Pods per run)")
            axis.grid(True, alpha=0.3)
        left.set_ylim(bottom=0)
        left.set_ylabel("seconds")
        left.set_title(
            f"{titles[scenario]}: latency from refusal to\n"
            "record stored (capture, solid) / Pod gone (baseline, dashed)",
            fontsize=10,
        )
        left.legend(fontsize=8, ncol=2)
        right.axhline(THROUGHPUT_TARGET, color="black", linewidth=0.8, linestyle=":", label="target: 50/s")
        right.set_ylim(bottom=0)
        right.set_ylabel("refused Pods handled per second")
        right.set_title(f"{titles[scenario]}: throughput, N / wall time", fontsize=10)
        right.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)


# -- the document ---------------------------------------------------------------------------------


def _targets(every: Sequence[Result]) -> list[str]:
    """The targets, judged on medians over each configuration's runs (the detail on ``every``)."""
    results = representatives(every)
    captures = [r for r in results if r.mode == "capture"]
    lines = _header(["Target", "Measured (median of the runs, min-max)", "Met?"], "lll")
    lines.append(_ratio_target(every, captures))
    lines.append(_cpu_target(every))
    lines.append(_calls_target(results, captures))
    lines.append(_throughput_target(every, captures))
    lines.append(_rss_target(every, captures))
    return lines


def _ratio_target(every: Sequence[Result], captures: Sequence[Result]) -> str:
    measured = {(r.scenario, r.n): ratios(every, r.scenario, r.n) for r in captures}
    largest = {s: max(n for (x, n) in measured if x == s) for (s, _) in measured}
    return _row(
        [
            f"capture/baseline wall-time ratio ≤ {RATIO_TARGET} (median of the runs) at the largest N",
            ", ".join(f"{s} N={n}: {spread(x)}" for (s, n), x in measured.items() if x),
            _verdicts(
                [r for r in captures if r.n == largest[r.scenario]],
                lambda r: median(measured[(r.scenario, r.n)]) <= RATIO_TARGET,
            )
            if any(measured.values())
            else "not measured",
        ]
    )


def _cpu_target(every: Sequence[Result]) -> str:
    cpu = runs_of(every, (CPU_TARGET[0], CPU_TARGET[1], "capture"))
    cpu_ms = [1000 * r.cpu_seconds / r.n for r in cpu]
    return _row(
        [
            f"operator CPU per refused Pod ≤ {CPU_TARGET_MS:.0f} ms in scenario {CPU_TARGET[0]} at "
            f"N = {CPU_TARGET[1]} (capture; start-up included)",
            spread(cpu_ms, "{:.1f}") + " ms" if cpu_ms else "not measured",
            ("met" if median(cpu_ms) <= CPU_TARGET_MS else "**missed**") if cpu_ms else "not measured",
        ]
    )


def _calls_target(results: Sequence[Result], captures: Sequence[Result]) -> str:
    extras: list[str] = []
    for scenario in sorted({r.scenario for r in captures}):
        found = {
            n: _capture_extras(results, scenario, n)
            for n in sorted({r.n for r in captures if r.scenario == scenario})
        }
        calls = sorted({call for extra in found.values() for call in extra})
        described = [
            f"`{call}` "
            + ", ".join(f"+{extra[call]:.2f} at N={n}" for n, extra in found.items() if call in extra)
            + ("" if any(extra.get(call, 0.0) >= 0.95 for extra in found.values()) else FRACTIONAL)
            for call in calls
        ]
        extras.append(f"{scenario}: " + ("; ".join(described) if described else "nothing"))
    beyond = {r.scenario: _beyond(r) for r in captures if r.n == max(x.n for x in captures)}
    return _row(
        [
            "no extra API call per Pod beyond the minimum (re-read, log read, delete)",
            "beyond its log read, the capture adds per Pod: "
            + "; ".join(extras)
            + ". The whole per-Pod path, the same in both modes, makes "
            + ", ".join(f"{s} {b:.2f}" for s, b in sorted(beyond.items()))
            + " requests beyond the minimum of 3 at the largest N (table below)",
            "**missed**" if any(b > 0.5 for b in beyond.values()) or any("+" in e for e in extras) else "met",
        ]
    )


def _throughput_target(every: Sequence[Result], captures: Sequence[Result]) -> str:
    pods_per_second = {r.key: median([x.throughput for x in runs_of(every, r.key)]) for r in captures}
    return _row(
        [
            f"≥ {THROUGHPUT_TARGET:.0f} refused Pods per second",
            ", ".join(
                f"{r.scenario} N={r.n}: {spread([x.throughput for x in runs_of(every, r.key)], '{:.1f}')}"
                for r in captures
            ),
            _verdicts(captures, lambda r: pods_per_second[r.key] >= THROUGHPUT_TARGET),
        ]
    )


def _rss_target(every: Sequence[Result], captures: Sequence[Result]) -> str:
    big = [r for r in captures if r.n == RSS_TARGET_N]
    peaks = {r.key: [x.peak_rss_mib for x in runs_of(every, r.key)] for r in big}
    return _row(
        [
            f"operator peak RSS ≤ {RSS_TARGET_MIB:.0f} MiB at N = {RSS_TARGET_N}",
            ", ".join(f"{r.scenario}: {spread(peaks[r.key], '{:.0f}')} MiB" for r in big) or "not measured",
            _verdicts(big, lambda r: median(peaks[r.key]) <= RSS_TARGET_MIB) if big else "not measured",
        ]
    )


def _verdicts(results: Sequence[Result], good: Callable[[Result], bool]) -> str:
    """``met``, ``**missed**``, or per scenario when they differ."""
    per = {
        scenario: all(good(r) for r in results if r.scenario == scenario)
        for scenario in sorted({r.scenario for r in results})
    }
    if all(per.values()):
        return "met"
    if not any(per.values()):
        return "**missed**"
    return "; ".join(f"{s}: {'met' if ok else '**missed**'}" for s, ok in per.items())


def _pair(results: Sequence[Result], scenario: str, n: int) -> tuple[Result | None, Result | None]:
    capture = next((r for r in results if r.key == (scenario, n, "capture")), None)
    baseline = next((r for r in results if r.key == (scenario, n, "baseline")), None)
    return capture, baseline


def _capture_extras(results: Sequence[Result], scenario: str, n: int) -> dict[str, float]:
    """Requests per Pod the capture run made beyond the baseline run's, its log read left out."""
    capture, baseline = _pair(results, scenario, n)
    if capture is None or baseline is None:
        return {}
    extra = {}
    for call, value in capture.api_per_pod.items():
        more = (
            value
            - baseline.api_per_pod.get(call, 0.0)
            - (MINIMUM.get(call, 0.0) if call == LOG_READ else 0.0)
        )
        if more >= 0.05:
            extra[call] = more
    return extra


def _beyond(result: Result) -> float:
    return sum(result.api_per_pod.values()) - sum(MINIMUM.values())


def _api_table(results: Sequence[Result], scenario: Scenario) -> list[str]:
    n = max((r.n for r in results if r.scenario == scenario), default=0)
    capture, baseline = _pair(results, scenario, n)
    calls = sorted({*(capture.api_per_pod if capture else {}), *(baseline.api_per_pod if baseline else {})})
    lines = [f"Scenario {scenario}, N = {n}, requests per refused Pod:", ""]
    lines += _header(["Request", "Capture", "Baseline", "Minimum", "Why"], "lrrrl")
    for call in calls:
        lines.append(
            _row(
                [
                    f"`{call}`",
                    f"{capture.api_per_pod.get(call, 0.0):.2f}" if capture else "",
                    f"{baseline.api_per_pod.get(call, 0.0):.2f}" if baseline else "",
                    f"{MINIMUM.get(call, 0.0):.0f}",
                    why(scenario, call),
                ]
            )
        )
    total_c = sum(capture.api_per_pod.values()) if capture else math.nan
    total_b = sum(baseline.api_per_pod.values()) if baseline else math.nan
    lines.append(_row(["**total**", f"{total_c:.2f}", f"{total_b:.2f}", f"{sum(MINIMUM.values()):.0f}", ""]))
    return lines


def _growth(results: Sequence[Result]) -> list[str]:
    sizes = sorted({r.n for r in results})
    metrics: list[tuple[str, Callable[[Result], float], str]] = [
        ("wall s", lambda r: r.wall_seconds, "{:.1f}"),
        ("Pods/s", lambda r: r.throughput, "{:.1f}"),
        ("p99 s", lambda r: percentile(latencies(r), 99), "{:.2f}"),
        ("API req/Pod", lambda r: sum(r.api_per_pod.values()), "{:.2f}"),
        ("Redis cmd/Pod", lambda r: sum(r.redis_per_pod.values()), "{:.2f}"),
        ("Redis MiB", lambda r: r.redis_used_memory / 1024 / 1024, "{:.2f}"),
        ("peak RSS MiB", lambda r: r.peak_rss_mib, "{:.0f}"),
        ("RSS at stop MiB", lambda r: r.rss_end_mib, "{:.0f}"),
        ("CPU ms/Pod", lambda r: 1000 * r.cpu_seconds / r.n, "{:.1f}"),
    ]
    lines = _header(
        ["Scenario", "Mode", "Figure", *(f"N={n}" for n in sizes), "How it grows"],
        "lll" + "r" * len(sizes) + "l",
    )
    for scenario in sorted({r.scenario for r in results}):
        for mode in ("capture", "baseline"):
            chosen = {r.n: r for r in results if r.scenario == scenario and r.mode == mode}
            if not chosen:
                continue
            for name, value, fmt in metrics:
                cells = [fmt.format(value(chosen[n])) if n in chosen else "" for n in sizes]
                lines.append(_row([scenario, mode, name, *cells, _trend(chosen, value, name)]))
    return lines


def _trend(chosen: dict[int, Result], value: Callable[[Result], float], name: str) -> str:
    sizes = sorted(chosen)
    if len(sizes) < 2:
        return ""
    first, last = chosen[sizes[0]], chosen[sizes[-1]]
    a, b = value(first), value(last)
    if not (math.isfinite(a) and math.isfinite(b)) or a == 0:
        return ""
    factor, scale = b / a, last.n / first.n
    if name in ("Redis MiB", "peak RSS MiB", "RSS at stop MiB"):
        slope = (b - a) / (last.n - first.n) * 1000
        return f"+{slope:.1f} MiB per 1000 N"
    if name in ("API req/Pod", "Redis cmd/Pod", "CPU ms/Pod", "Pods/s"):
        steady = "flat" if 0.9 <= factor <= 1.1 else "changes"
        return f"x{factor:.2f} from N={sizes[0]} to {sizes[-1]} ({steady})"
    kind = (
        "linear in N"
        if 0.6 * scale <= factor <= 1.5 * scale
        else ("sublinear" if factor < scale else "superlinear")
    )
    return f"x{factor:.1f} for N x{scale:.0f}: {kind}"


def _redis_table(results: Sequence[Result]) -> list[str]:
    commands = sorted({c for r in results for c in r.redis_per_pod})
    lines = _header(
        ["Scenario", "N", "Mode", *commands, "total", "record bytes", "used_memory Δ per N"],
        "lrl" + "r" * (len(commands) + 3),
    )
    for r in results:
        cells = [f"{r.redis_per_pod.get(c, 0.0):.2f}" for c in commands]
        lines.append(
            _row(
                [
                    r.scenario,
                    r.n,
                    r.mode,
                    *cells,
                    f"{sum(r.redis_per_pod.values()):.2f}",
                    f"{r.record_bytes:.0f}",
                    f"{r.redis_memory_delta / r.n:.0f} B",
                ]
            )
        )
    return lines


def _cpu_table(results: Sequence[Result], nproc: int) -> list[str]:
    names = sorted({name for r in results for name in r.cpu_window}, key=lambda n: (n != "operator", n))
    lines = _header(
        ["Scenario", "N", "Mode", "Window s", "Machine busy", *names, "everything else"],
        "lrl" + "r" * (len(names) + 3),
    )
    for r in results:
        busy = r.machine_busy * nproc * r.settle_seconds
        others = busy - sum(r.cpu_window.values())
        cells = [f"{r.cpu_window.get(name, 0.0):.1f}" for name in names]
        lines.append(
            _row(
                [
                    r.scenario,
                    r.n,
                    r.mode,
                    f"{r.settle_seconds:.0f}",
                    f"{100 * r.machine_busy:.0f}%",
                    *cells,
                    f"{max(others, 0.0):.1f}",
                ]
            )
        )
    return lines


def document(
    results: Sequence[Result],
    *,
    machine: dict[str, str],
    command: str,
    elapsed: float,
    workdir: Path,
    against: Sequence[str] = (),
    runs: int | None = None,
) -> str:
    """The report; ``against`` is ``--against``'s section (``against.section``), after the results;
    ``runs``: how many runs the bench made (REV's too), when not only ``results``."""
    nproc = int(machine["nproc"] or os.cpu_count() or 1)
    notes = NOTES.read_text().strip() if NOTES.exists() else ""
    every = list(results)
    results = representatives(every)
    parts = [
        *_introduction(
            runs if runs is not None else len(every),
            machine=machine,
            command=command,
            elapsed=elapsed,
            workdir=workdir,
        ),
        *_results(every),
        *([*against, ""] if against else []),
        *_api_requests(results),
        *_redis_and_cpu(results, nproc=nproc),
        *_definitions(results),
    ]
    if notes:
        parts += ["", notes]
    return "\n".join(parts) + "\n"


def _introduction(
    runs: int, *, machine: dict[str, str], command: str, elapsed: float, workdir: Path
) -> list[str]:
    """The command, the machine and what shares it."""
    return [
        "# Benchmarks: the capture against a baseline",
        "",
        "Generated by the command below; do not edit by hand (the notes at the end come from "
        "`tests/bench/notes.md`).",
        "",
        "```sh",
        command,
        "```",
        "",
        f"Run on {machine['date']}; it took {elapsed / 60:.1f} minutes in all (control plane start, "
        f"planting, {runs} runs). Raw results and every operator log: `{workdir}` (not kept).",
        "",
        "| Machine | |",
        "| --- | --- |",
        f"| `nproc` | {machine['nproc']} |",
        f"| memory | {machine['memory']} |",
        f"| CPU (/proc/cpuinfo) | {machine['cpu']} |",
        f"| Python | {machine['python']} |",
        f"| kopf | {machine['kopf']} |",
        f"| kubernetes-asyncio | {machine['kubernetes-asyncio']} |",
        f"| control plane | kube-apiserver {machine['kubernetes']}, etcd, kwok (tests/support/cluster.py) |",
        f"| redis-server | {machine['redis-server']} |",
        f"| load average at the start | {machine['load']} (other work on the machine shows as "
        "'everything else' in the CPU table) |",
        "",
        "Everything runs on this one machine and shares its CPUs: kube-apiserver, etcd, kwok, the "
        "scheduler and controller-manager, redis-server, the operator, and the bench itself (with the "
        "counting proxy in a thread of its process).",
        "",
    ]


def _results(every: Sequence[Result]) -> list[str]:
    """Medians and every run, the targets, and how each figure grows with N."""
    repeats = max((r.repeat + 1 for r in every), default=1)
    results = representatives(every)
    incomplete = [r for r in every if not r.complete or r.notes]
    return [
        "## Results",
        "",
        f"Each configuration ran {repeats} times, interleaved with its baseline (a capture run and "
        "the baseline run next to it form a pair; which of the two goes first alternates from pair "
        "to pair). Medians and spreads first; every run below them. The later sections show, for "
        "each configuration, the run with the median wall time.",
        "",
        *_medians(every),
        "",
        "Time from a worker's refusal to its stored capture (capture runs; refusal and record "
        "stored as defined below; *last* is from the run's first refusal to its last record "
        "stored), median (min-max) over the runs:",
        "",
        *_evidence(every),
        "",
        table(every),
        "",
        *(
            [f"⚠ {r.scenario} {r.mode} N={r.n}: {'; '.join(r.notes) or 'incomplete'}" for r in incomplete]
            + [""]
            if incomplete
            else []
        ),
        "![latency and throughput against N](benchmarks.png)",
        "",
        "## Targets",
        "",
        *_targets(every),
        "",
        "## How each figure grows with N",
        "",
        *_growth(results),
        "",
    ]


def _api_requests(results: Sequence[Result]) -> list[str]:
    parts = [
        "## API requests per refused Pod",
        "",
        "Every request the operator sent through the counting proxy from the first Execution (A: "
        "from the operator's process start) until the operator went quiet, divided by N, by method "
        "and path with names replaced by placeholders. Watches, the lists they start from, the API "
        "discovery and the leadership Lease are per operator, not per Pod, and are left out (listed "
        "below the tables). The minimum is what the spec needs for a refused Pod with one "
        "terminated container: one re-read, one log read, one delete.",
        "",
    ]
    for scenario in sorted({r.scenario for r in results}):
        parts += [*_api_table(results, scenario), ""]
    wide = "; ".join(
        f"{r.scenario} {r.mode} N={r.n}: " + ", ".join(f"`{k}` {v}" for k, v in r.api_operator_wide.items())
        for r in results
        if r.n == max(x.n for x in results)
    )
    return [*parts, f"Per operator (at the largest N): {wide}.", ""]


def _redis_and_cpu(results: Sequence[Result], *, nproc: int) -> list[str]:
    return [
        "## Redis",
        "",
        "`INFO commandstats` deltas from the first Execution (A: from before the operator's start) "
        "until the operator went quiet, per "
        "refused Pod (the bench's own `HLEN`/`INFO` polling left out); the mean size of the "
        "scenario's records (A: `attempt-startup-diagnostics`, B: `attempt-retained`, whose "
        "`removed.pods[].startup` holds the capture); and `used_memory` growth per Execution "
        "(all of the operator's hashes, from an empty database). `hello`/`ping` are the client "
        "opening pool connections.",
        "",
        *_redis_table(results),
        "",
        "## Where the CPU goes",
        "",
        "CPU seconds per process from the first Execution (A: the operator's start line) until the "
        "operator went quiet "
        f"(`/proc/PID/stat`), and the machine's busy share of its {nproc} CPUs over that window.",
        "",
        *_cpu_table(results, nproc),
        "",
    ]


def _definitions(results: Sequence[Result]) -> list[str]:
    """What each scenario, mode and figure means."""
    return [
        "## Definitions",
        "",
        "- **Scenario A, refused at launch**: what launches that stopped before recording their "
        "hands leave, found by an operator that starts. With no operator running, N Executions "
        "for a project outside the Swarm's registration are created, then each one's worker Pod "
        "`swarm-worker-<execution>-1` is planted as its launch makes it: its attempt labels, a "
        "controller ownerReference to its Execution by UID and, when the operator under test "
        "releases it, the evidence finalizer; already `Failed` (exit 78, the planted log line "
        "`worker startup refused: planted kind refusal`). Once every Pod is Failed the operator "
        "starts. It adopts each Pod (its Execution owns it), the hand is refused "
        "(`project_unpermitted`), and launch removal captures, stores the record with `HSETNX`, "
        "deletes the Pod and releases its finalizer.",
        f"- **Scenario B, failed after the hand**: N Executions of a Swarm whose worker template "
        f"makes kwok run the Pod for {RUN_FOR} and then fail it with 78. The step that finds the "
        "worker Failed (the resync steps every Execution in flight every "
        f"{CHART_DEFAULTS['AGENTIHOOKS_SWARM_CLEANUP_INTERVAL_SECONDS']} s, the chart's default) "
        "captures, deletes and writes `attempt-retained`.",
        "- **Modes**: capture is the operator's production wiring; baseline is the same operator "
        "with a runtime assembled in the bench (`tests/bench/controller.py`) whose startup capture "
        "captures nothing: plain UID-pinned deletes, no log read, no capture in Redis (the operator "
        "itself has no switch for that). Each run has a fresh namespace, a freshly flushed Redis "
        "and a fresh operator process (`python -m tests.bench.controller --namespace NS "
        "[--baseline]`: the operator's own `serve`, as `python -m agentihooks_swarm run` starts it, "
        "no `--verbose`, the "
        "chart's timings: "
        + ", ".join(f"`{k}={v}`" for k, v in CHART_DEFAULTS.items())
        + ") talking to kube-apiserver through the counting proxy (`tests/support/proxy.py`, no "
        "fault rules). Each configuration runs several times (see Results), each capture run next to a "
        "baseline run; which goes first alternates from pair to pair.",
        f"- The N Executions (and A's Pods) are created {CREATE_PARALLELISM} at a time straight to "
        "the API server (not through the proxy). In B that time is part of the wall time; in A it "
        "is before the operator starts.",
        "- **Refusal time**: A: the operator's start, the moment the bench sees its "
        "`agentihooks-swarm started` line (logged once its Lease is decided, as its tasks start; "
        "polled every 0.1 s): every worker was refused and Failed before, and none could be "
        "handled sooner; the interpreter's imports before that line are left out. B: the moment "
        "the bench's Pod watch delivers the Pod in phase "
        "`Failed` (the container's `finishedAt` has whole seconds only; the watch lags it by at "
        "most "
        + ", ".join(
            f"{r.watch_lag_max:.2f} s ({r.mode} N={r.n})" for r in results if r.watch_lag_max is not None
        )
        + ", including that rounding).",
        "- **Record stored**: the Redis server's own MONITOR timestamp of the `HSETNX` into "
        "`attempt-startup-diagnostics` (A) or of the `HSET` into `attempt-retained` (B) for that "
        "Execution. **Pod gone**: the bench's Pod watch delivering `DELETED` (kwok confirms a delete "
        "as a kubelet does). Latency percentiles are nearest-rank over the N Executions: refusal → "
        "record stored in capture mode, refusal → Pod gone in baseline mode. **Last**: from the "
        "run's first refusal to its last record stored (capture) or last Pod gone (baseline): when "
        "the burst's evidence was complete.",
        "- **Wall time**: from the clock's start (A: the operator's start; B: the first create "
        "request) to the last Pod gone and (capture) the last record stored. **Pods/s**: N / wall "
        "time. **Wall c/b**: a capture run's wall time / the wall "
        "time of the baseline run next to it (same N, same repeat); its median over the repeats is "
        "the figure the target is judged on.",
        f"- **Settled**: every Pod gone, every record stored, every Execution `Done`, and no request "
        f"but watches and the Lease for {QUIET_SECONDS:.0f} s. API, Redis and CPU figures cover "
        "the first create request (B) until then; in A, the API requests and Redis commands count "
        "from the operator's process start (its work starts at once) and the CPU window from its "
        "start line, and its start-up's lists, discovery and per-Swarm requests show as per operator "
        "or at 1 / N; the operator's peak RSS (`VmHWM`) and CPU seconds "
        "(utime + stime, plus reaped children's, from `/proc/PID/stat`) are read just before it is "
        "stopped, so they include its start-up.",
    ]
