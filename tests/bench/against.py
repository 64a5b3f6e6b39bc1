"""``python -m tests.bench --against REV``: the working tree's operator side by side with REV's.

REV is checked out in a git worktree outside the repository; its operator runs from that
worktree's ``operator/`` with this venv's interpreter (the dependencies are this venv's), so the
two sides differ only in the operator's code. Each run of the working tree has a run of REV next
to it (same scenario, N, mode and repeat), and every figure is reported as the ratio of the two:
working tree / REV, median and min-max over the pairs.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.bench import run
from tests.bench.report import latencies, median, percentile
from tests.bench.run import Mode, Result, Scenario


@dataclass(frozen=True)
class Revision:
    """The revision the working tree is compared against."""

    commit: str
    """The full commit hash."""
    short: str
    subject: str

    @property
    def title(self) -> str:
        return f"{self.short} {self.subject}"


@dataclass(frozen=True)
class Figure:
    """One figure of a run that the comparison reports as a ratio."""

    name: str
    value: Callable[[Result], float]
    fmt: str = "{:.2f}"


def evidence_last(result: Result) -> float:
    return math.nan if result.evidence_last is None else result.evidence_last


FIGURES: Final = (
    Figure("API req/Pod", lambda r: sum(r.api_per_pod.values())),
    Figure("CPU ms/Pod", lambda r: 1000 * r.cpu_seconds / r.n if r.n else math.nan, "{:.1f}"),
    Figure("evidence p50 s", lambda r: percentile(latencies(r), 50)),
    Figure("evidence p99 s", lambda r: percentile(latencies(r), 99)),
    Figure("evidence last s", evidence_last, "{:.1f}"),
    Figure("wall s", lambda r: r.wall_seconds, "{:.1f}"),
    Figure("Pods/s", lambda r: r.throughput, "{:.1f}"),
)


def pairs(*, results: Sequence[Result]) -> dict[tuple[Scenario, int, Mode], list[tuple[Result, Result]]]:
    """``(working tree run, REV run)`` of each configuration, one pair per repeat both sides ran."""
    revs = {(r.scenario, r.n, r.mode, r.repeat): r for r in results if r.revision}
    found: dict[tuple[Scenario, int, Mode], list[tuple[Result, Result]]] = {}
    for tree in results:
        if tree.revision:
            continue
        rev = revs.get((tree.scenario, tree.n, tree.mode, tree.repeat))
        if rev is not None:
            found.setdefault(tree.key, []).append((tree, rev))
    return found


def ratio(*, tree: float, rev: float) -> float | None:
    """``tree / rev``; None when either is not a number or REV's is 0 (no ratio to report)."""
    if not (math.isfinite(tree) and math.isfinite(rev)) or rev == 0:
        return None
    return tree / rev


def ratios(*, pairs_: Sequence[tuple[Result, Result]], figure: Figure) -> list[float]:
    """The figure's working tree / REV ratio of each pair that has one."""
    found = (ratio(tree=figure.value(tree), rev=figure.value(rev)) for tree, rev in pairs_)
    return [x for x in found if x is not None]


def spread(values: Sequence[float]) -> str:
    """``median (min-max, k pairs)`` of ratios, two decimals; ``n/a`` for none."""
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.2f} (1 pair)"
    return f"{median(values):.2f} ({min(values):.2f}-{max(values):.2f}, {len(values)} pairs)"


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _capture_over_baseline(*, results: Sequence[Result], scenario: Scenario, n: int) -> list[float]:
    """Each repeat's capture/baseline wall-time ratio on one side (``results`` all of that side)."""
    walls = {(r.mode, r.repeat): r.wall_seconds for r in results if (r.scenario, r.n) == (scenario, n)}
    found = (
        ratio(tree=wall, rev=walls.get(("baseline", repeat), math.nan))
        for (mode, repeat), wall in walls.items()
        if mode == "capture"
    )
    return [x for x in found if x is not None]


def section(*, results: Sequence[Result], revision: Revision, tree: Revision | None = None) -> list[str]:
    """The report's "Against REV" section: every figure as working tree / REV, per configuration.

    ``tree`` (``--tree``): the revision that ran in the working tree's place, named in the text."""
    found = pairs(results=results)
    lines = _section(results=results, revision=revision, found=found)
    if tree is None:
        return lines
    named = [line.replace("working tree", tree.short) for line in lines]
    return [
        f"## {tree.title}, against {revision.title}",
        "",
        f"`{tree.commit}` ran in the working tree's place (`--tree`), from a worktree of its own.",
        *named[1:],
    ]


def _section(
    *,
    results: Sequence[Result],
    revision: Revision,
    found: dict[tuple[Scenario, int, Mode], list[tuple[Result, Result]]],
) -> list[str]:
    lines = [
        f"## Against {revision.title}",
        "",
        f"REV is `{revision.commit}`, run from a git worktree with the same interpreter and "
        "dependencies as the working tree. Each run of the working tree has a run of REV next to it "
        "(same scenario, N, mode and repeat; which of the two goes first alternates), and each cell "
        "is the figure's ratio **working tree / REV** over those pairs: median (min-max, pairs). "
        "Below 1 the working tree is lower: better for every figure but throughput, where above 1 "
        "is better. Evidence is refusal to record stored (capture) or to Pod gone (baseline); "
        "*last* is from the first refusal to the last evidence of the run. CPU is the operator's, "
        "start-up included.",
        "",
        _row(["Scenario", "N", "Mode", *(f.name for f in FIGURES)]),
        _row(["---", "---:", "---", *("---:" for _ in FIGURES)]),
    ]
    for (scenario, n, mode), chosen in found.items():
        cells = [spread(ratios(pairs_=chosen, figure=f)) for f in FIGURES]
        lines.append(_row([scenario, n, mode, *cells]))
    if not found:
        lines.append(_row(["no pairs", "", "", *("" for _ in FIGURES)]))
    lines += ["", *_medians(found=found)]
    lines += _planted(results=results)
    configurations = list(dict.fromkeys((s, n) for s, n, _ in found))
    if configurations:
        tree = [r for r in results if not r.revision]
        rev = [r for r in results if r.revision]
        lines += [
            "",
            "Capture/baseline wall-time ratio on each side (median, min-max): "
            + "; ".join(
                f"{s} N={n}: working tree {_plain(_capture_over_baseline(results=tree, scenario=s, n=n))}, "
                f"REV {_plain(_capture_over_baseline(results=rev, scenario=s, n=n))}"
                for s, n in configurations
            )
            + ".",
        ]
    return lines


def _medians(*, found: dict[tuple[Scenario, int, Mode], list[tuple[Result, Result]]]) -> list[str]:
    """Each figure's median on each side over the same pairs: what the ratios are ratios of."""
    lines = [
        "The figures themselves, median over the same runs, working tree / REV:",
        "",
        _row(["Scenario", "N", "Mode", *(f.name for f in FIGURES)]),
        _row(["---", "---:", "---", *("---:" for _ in FIGURES)]),
    ]
    for (scenario, n, mode), chosen in found.items():
        cells = [
            " / ".join(_figure(figure=f, values=[f.value(pair[side]) for pair in chosen]) for side in (0, 1))
            for f in FIGURES
        ]
        lines.append(_row([scenario, n, mode, *cells]))
    return lines


def _planted(*, results: Sequence[Result]) -> list[str]:
    """How each side's scenario A Pods were planted, when the two sides differ in it."""
    sides = {
        "working tree" if not r.revision else "REV": r.planted_finalizer
        for r in results
        if r.scenario == "A" and r.planted_finalizer is not None
    }
    if len(set(sides.values())) < 2:
        return []
    with_it = " and ".join(side for side, finalizer in sides.items() if finalizer)
    without = " and ".join(side for side, finalizer in sides.items() if not finalizer)
    return [
        "",
        f"Scenario A's planted Pods carry the evidence finalizer on the {with_it} side only, as "
        f"each side's own launch makes its Pods: the {without} operator deletes a Pod but never "
        "releases a finalizer it does not know, so such a Pod would stay terminating and never be "
        "gone. Both sides' Pods are owned by their Execution (an operator without ownership ignores "
        "the reference). The release (one PATCH per Pod, and the Pod going only after it) is a cost "
        f"of the {with_it} side, and stays in its figures.",
    ]


def _figure(*, figure: Figure, values: Sequence[float]) -> str:
    """The median of the values that are numbers, in the figure's format."""
    numbers = [v for v in values if math.isfinite(v)]
    return figure.fmt.format(median(numbers)) if numbers else "n/a"


def _plain(values: Sequence[float]) -> str:
    return spread(values).replace(" pairs)", " runs)").replace("(1 pair)", "(1 run)")


# -- the worktree ---------------------------------------------------------------------------------


class AgainstError(RuntimeError):
    """REV cannot be compared against: not a commit, or its operator does not import here."""


def resolve(*, repo: Path, rev: str) -> Revision:
    """REV as a commit of ``repo``, with its short hash and subject."""
    shown = subprocess.run(
        ["git", "-C", str(repo), "log", "-1", "--format=%H%n%h%n%s", f"{rev}^{{commit}}", "--"],
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        raise AgainstError(f"--against {rev}: not a commit of {repo}: {shown.stderr.strip()}")
    commit, short, subject = [*shown.stdout.splitlines(), "", "", ""][:3]
    return Revision(commit=commit, short=short, subject=subject)


def check_imports(*, source: Path, repo: Path) -> None:
    """Fail clearly when REV's operator (and the controller that starts it) does not import with
    this venv, or would import the working tree's package instead of REV's."""
    probe = (
        "import agentihooks_swarm, agentihooks_swarm.__main__, tests.bench.controller; "
        "print(agentihooks_swarm.__file__)"
    )
    env = dict(os.environ, PYTHONPATH=run.python_path(source=source, existing=os.environ.get("PYTHONPATH")))
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=run.controller_root(source=source, repo=repo),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise AgainstError(
            f"REV's operator does not import with this venv ({sys.executable}); its dependencies may "
            f"differ from the working tree's:\n{done.stderr.strip()[-2000:]}"
        )
    imported = Path(done.stdout.strip().splitlines()[-1]).resolve()
    if not imported.is_relative_to(source.resolve()):
        raise AgainstError(f"REV's operator would be imported from {imported}, not from {source}")


@contextlib.contextmanager
def worktree(*, repo: Path, revision: Revision) -> Iterator[Path]:
    """REV checked out (detached) in a temporary directory outside the repository; removed after."""
    parent = Path(tempfile.mkdtemp(prefix="agentihooks-swarm-against-"))
    path = parent / revision.short
    added = subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet", str(path), revision.commit],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        if added.returncode != 0:
            raise AgainstError(f"git worktree add {revision.short} failed: {added.stderr.strip()}")
        yield path
    finally:
        if added.returncode == 0:
            subprocess.run(
                ["git", "-C", str(repo), "worktree", "remove", "--force", str(path)],
                capture_output=True,
                check=False,
            )
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True, check=False)
        shutil.rmtree(parent, ignore_errors=True)
