"""``python -m tests.bench [--sizes 100,500,2000] [--out docs]``: run every measurement, write the report."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path

from tests.bench import against, history, report
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


def plan_against(
    *, sizes: Sequence[int], scenarios: Sequence[Scenario], wanted: Sequence[str], repeats: int
) -> list[tuple[Scenario, Mode, int, int, bool]]:
    """:func:`_plan` with each run next to its twin on REV (the last item: True for REV's run).

    Each group of four (one scenario, N and repeat) runs as ``ABBA`` on the side: working tree,
    REV, REV, working tree, or the other way round, alternating from group to group, with the
    modes' order alternating as in :func:`_plan`; each working tree / REV pair is adjacent, and
    each side's capture and baseline runs are in one group."""
    groups: dict[tuple[Scenario, int, int], list[tuple[Scenario, Mode, int, int]]] = {}
    for item in _plan(sizes, scenarios, wanted, repeats):
        groups.setdefault((item[0], item[2], item[3]), []).append(item)
    plan: list[tuple[Scenario, Mode, int, int, bool]] = []
    for turn, group in enumerate(groups.values()):
        sides = (False, True) if turn % 2 == 0 else (True, False)
        for index, (scenario, mode, n, repeat) in enumerate(group):
            order = sides if index % 2 == 0 else sides[::-1]
            plan.extend((scenario, mode, n, repeat, side) for side in order)
    return plan


def parser() -> argparse.ArgumentParser:
    parsing = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parsing.add_argument("--sizes", default="100,500,2000", help="comma-separated N values")
    parsing.add_argument(
        "--scenarios", default="A,B", help="A (refused at launch), B (failed after the hand)"
    )
    parsing.add_argument("--modes", default="capture,baseline", help="capture, baseline (both by default)")
    parsing.add_argument("--repeats", type=int, default=3, help="runs of each configuration (interleaved)")
    parsing.add_argument(
        "--profile",
        action="store_true",
        help="sample the operator with py-spy (pip install py-spy), and kube-apiserver with pprof",
    )
    parsing.add_argument("--out", type=Path, default=REPO / "docs", help="where benchmarks.md/.png go")
    parsing.add_argument(
        "--from-results", type=Path, help="write the report again from a run's results.json, measure nothing"
    )
    parsing.add_argument(
        "--against",
        metavar="REV",
        help="also run REV's operator (from a git worktree, this venv) next to each run of the working "
        "tree's, and report every figure as the ratio working tree / REV",
    )
    parsing.add_argument(
        "--tree",
        metavar="REV",
        help="with --against: run REV's operator (from a git worktree of its own) in the working tree's "
        "place, to compare two revisions side by side",
    )
    return parsing


@contextlib.contextmanager
def _revision(*, rev: str | None) -> Iterator[tuple[against.Revision, Path] | None]:
    """``--against REV``: REV and its worktree (checked to import with this venv), or None."""
    if rev is None:
        yield None
        return
    revision = against.resolve(repo=REPO, rev=rev)
    with against.worktree(repo=REPO, revision=revision) as source:
        against.check_imports(source=source, repo=REPO)
        print(f"bench: against {revision.title} (worktree {source})", flush=True)
        yield revision, source


def main(argv: Sequence[str] | None = None) -> int:
    signals.exit_on_sigterm()
    parsing = parser()
    args = parsing.parse_args(argv)
    if args.from_results is not None:
        saved = json.loads(args.from_results.read_text())
        _write(
            [Result(**r) for r in saved["results"]],
            args.out,
            machine=saved["machine"],
            command=saved["command"],
            elapsed=saved["elapsed"],
            workdir=args.from_results.parent,
            revision=against.Revision(**saved["against"]) if saved.get("against") else None,
            tree=against.Revision(**saved["tree"]) if saved.get("tree") else None,
        )
        return 0
    if args.profile and not PY_SPY.exists():
        parsing.error(f"--profile samples with py-spy: {PY_SPY.with_name('pip')} install py-spy")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    scenarios: list[Scenario] = [s for s in ("A", "B") if s in args.scenarios.split(",")]
    command = (
        "make bench"
        if argv is None and os.environ.get("MAKELEVEL")
        else shlex.join(["python", "-m", "tests.bench", *(sys.argv[1:] if argv is None else argv)])
    )
    if args.tree is not None and args.against is None:
        parsing.error("--tree REV runs in the working tree's place against --against's revision: give both")
    try:
        with _revision(rev=args.against) as compared, _revision(rev=args.tree) as tree:
            return _measure(
                args=args, sizes=sizes, scenarios=scenarios, command=command, compared=compared, tree=tree
            )
    except against.AgainstError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2


def _measure(
    *,
    args: argparse.Namespace,
    sizes: list[int],
    scenarios: list[Scenario],
    command: str,
    compared: tuple[against.Revision, Path] | None,
    tree: tuple[against.Revision, Path] | None = None,
) -> int:
    """Every run of the plan (with REV's twins when ``compared``; ``tree``'s operator in the working
    tree's place), then the report."""
    workdir = Path(tempfile.mkdtemp(prefix="agentihooks-swarm-bench-"))
    print(f"bench: work directory {workdir} (operator logs, Redis MONITOR streams, results.json)")
    machine = report.machine()
    began = time.monotonic()
    revision, source = compared if compared is not None else (None, None)
    wanted = args.modes.split(",")
    plan = (
        plan_against(sizes=sizes, scenarios=scenarios, wanted=wanted, repeats=args.repeats)
        if revision is not None
        else [(*item, False) for item in _plan(sizes, scenarios, wanted, args.repeats)]
    )
    cluster, owned = running_cluster(workdir, profiling=args.profile)
    results: list[Result] = []
    namespaces: list[str] = []
    try:
        crds.apply(cluster)
        with RedisServer() as redis_server:
            for scenario, mode, n, repeat, on_rev in plan:
                run = Run(
                    repeat=repeat,
                    cluster=cluster,
                    redis_server=redis_server,
                    workdir=workdir,
                    scenario=scenario,
                    mode=mode,
                    n=n,
                    profile=args.profile,
                    source=source if on_rev else (tree[1] if tree is not None else None),
                    revision=revision.short if on_rev and revision is not None else "",
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
                    **({"against": asdict(revision)} if revision is not None else {}),
                    **({"tree": asdict(tree[0])} if tree is not None else {}),
                }
                (workdir / "results.json").write_text(json.dumps(saved, indent=1))
    finally:
        if owned:
            cluster.stop()
        else:
            for namespace in namespaces:
                asyncio.run(remove_namespace(cluster, namespace))
    _write(
        results,
        args.out,
        machine=machine,
        command=command,
        elapsed=time.monotonic() - began,
        workdir=workdir,
        revision=revision,
        tree=tree[0] if tree is not None else None,
    )
    return 0


def _write(
    every: list[Result],
    out: Path,
    *,
    machine: dict[str, str],
    command: str,
    elapsed: float,
    workdir: Path,
    revision: against.Revision | None = None,
    tree: against.Revision | None = None,
) -> None:
    # The report's own sections are the working tree's runs; REV's appear only in its ratios.
    results = [r for r in every if not r.revision]
    compared = against.section(results=every, revision=revision, tree=tree) if revision is not None else []
    print(report.table(results))
    if compared:
        print("\n".join(compared))
    out.mkdir(parents=True, exist_ok=True)
    written = "benchmarks.md and benchmarks.png"
    try:
        report.plot(results, out / "benchmarks.png")
    except ModuleNotFoundError as error:  # A run's figures are worth more than its plot.
        if error.name != "matplotlib":
            raise
        written = "benchmarks.md (no benchmarks.png: matplotlib is missing; pip install -e '.[bench]')"
    text = report.document(
        results,
        machine=machine,
        command=command,
        elapsed=elapsed,
        workdir=workdir,
        against=compared,
        runs=len(every),
    )
    (out / "benchmarks.md").write_text(text)
    history_doc = out / "benchmarks-history.md"
    if history_doc.exists():  # make bench-history's latest section, kept in the regenerated report.
        section = history_doc.read_text()
        section = section[section.index(history.MARKER_START) :] if history.MARKER_START in section else ""
        if section:
            history.splice(out / "benchmarks.md", section)
    print(f"bench: wrote {written} to {out} ({elapsed / 60:.1f} min in all)")


if __name__ == "__main__":
    sys.exit(main())
