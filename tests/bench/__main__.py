"""``python -m tests.bench [--sizes 100,500,2000] [--out docs]``: run every measurement, write the report."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from tests.bench import history, report
from tests.bench.run import PY_SPY, Mode, Result, Run, Scenario, remove_namespace, running_cluster
from tests.support import crds, signals
from tests.support.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]


def _plan(
    sizes: Sequence[int], scenarios: Sequence[Scenario], wanted: Sequence[str], repeats: int = 1
) -> list[tuple[Scenario, Mode, int, int]]:
    """Each configuration ``repeats`` times, interleaved: at each N, capture and baseline side by
    side for each repeat in turn, and which goes first alternates from one pair to the next, so
    drift on the machine falls on both modes alike and each ratio is of neighbouring runs."""
    plan: list[tuple[Scenario, Mode, int, int]] = []
    turn = 0
    for n in sizes:
        for repeat in range(repeats):
            for scenario in scenarios:
                modes: tuple[Mode, Mode] = (
                    ("capture", "baseline") if turn % 2 == 0 else ("baseline", "capture")
                )
                turn += 1
                plan.extend((scenario, mode, n, repeat) for mode in modes if mode in wanted)
    return plan


def main(argv: Sequence[str] | None = None) -> int:
    signals.exit_on_sigterm()
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("--sizes", default="100,500,2000", help="comma-separated N values")
    parser.add_argument("--scenarios", default="A,B", help="A (refused at launch), B (failed after the hand)")
    parser.add_argument("--modes", default="capture,baseline", help="capture, baseline (both by default)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each configuration (interleaved)")
    parser.add_argument(
        "--profile", action="store_true", help="sample the operator with py-spy (pip install py-spy)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="where benchmarks.md/.png go")
    parser.add_argument(
        "--from-results", type=Path, help="write the report again from a run's results.json, measure nothing"
    )
    args = parser.parse_args(argv)
    if args.from_results is not None:
        saved = json.loads(args.from_results.read_text())
        _write(
            [Result(**r) for r in saved["results"]],
            args.out,
            machine=saved["machine"],
            command=saved["command"],
            elapsed=saved["elapsed"],
            workdir=args.from_results.parent,
        )
        return 0
    if args.profile and not PY_SPY.exists():
        parser.error(f"--profile samples with py-spy: {PY_SPY.with_name('pip')} install py-spy")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    scenarios: list[Scenario] = [s for s in ("A", "B") if s in args.scenarios.split(",")]
    command = (
        "make bench"
        if argv is None and os.environ.get("MAKELEVEL")
        else shlex.join(["python", "-m", "tests.bench", *(sys.argv[1:] if argv is None else argv)])
    )
    workdir = Path(tempfile.mkdtemp(prefix="agentihooks-swarm-bench-"))
    print(f"bench: work directory {workdir} (operator logs, Redis MONITOR streams, results.json)")
    machine = report.machine()
    began = time.monotonic()
    cluster, owned = running_cluster(workdir)
    results: list[Result] = []
    namespaces: list[str] = []
    try:
        crds.apply(cluster)
        with RedisServer() as redis_server:
            for scenario, mode, n, repeat in _plan(sizes, scenarios, args.modes.split(","), args.repeats):
                run = Run(
                    repeat=repeat,
                    cluster=cluster,
                    redis_server=redis_server,
                    workdir=workdir,
                    scenario=scenario,
                    mode=mode,
                    n=n,
                    profile=args.profile,
                )
                started = time.monotonic()
                try:
                    results.append(asyncio.run(run.perform()))
                finally:
                    namespaces.extend([run.namespace] if run.namespace else [])
                took = time.monotonic() - started
                print(f"bench: {report.one_line(results[-1])} ({took:.0f}s with setup)", flush=True)
                saved = {
                    "machine": machine,
                    "command": command,
                    "elapsed": time.monotonic() - began,
                    "results": [asdict(r) for r in results],
                }
                (workdir / "results.json").write_text(json.dumps(saved, indent=1))
    finally:
        if owned:
            cluster.stop()
        else:
            for namespace in namespaces:
                asyncio.run(remove_namespace(cluster, namespace))
    _write(
        results, args.out, machine=machine, command=command, elapsed=time.monotonic() - began, workdir=workdir
    )
    return 0


def _write(
    results: list[Result], out: Path, *, machine: dict[str, str], command: str, elapsed: float, workdir: Path
) -> None:
    print(report.table(results))
    out.mkdir(parents=True, exist_ok=True)
    report.plot(results, out / "benchmarks.png")
    text = report.document(results, machine=machine, command=command, elapsed=elapsed, workdir=workdir)
    (out / "benchmarks.md").write_text(text)
    history_doc = out / "benchmarks-history.md"
    if history_doc.exists():  # make bench-history's latest section, kept in the regenerated report.
        section = history_doc.read_text()
        section = section[section.index(history.MARKER_START) :] if history.MARKER_START in section else ""
        if section:
            history.splice(out / "benchmarks.md", section)
    print(f"bench: wrote benchmarks.md and benchmarks.png to {out} ({elapsed / 60:.1f} min in all)")


if __name__ == "__main__":
    sys.exit(main())
