"""``python -m tests.soak [--seed N] [--executions N | --duration S] [--rate R] [--quick]
[--node kwok|real] [--out DIR]``: a seeded chaos soak (``make soak``; ``make soak NODE=real`` on
the real node). The seed is printed first; ``--seed`` replays the same workload and fault
schedule. Exit code 0: no violation; 1: violations (listed in the report); 2: the soak itself could not run.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path

from tests.soak.run import Options, run
from tests.support import signals

#: Executions created per second by default, and seconds per fault: on kwok the load the soak was
#: first meant to hold, 10,000 Executions in about 28 minutes with a fault every 4 s; a leader
#: change each minute or so and the leader's API or Redis faulty for a large share of the run, on
#: a 2-core machine that also runs the control plane, Redis and the checker. The real node's
#: ``maxPods`` (60) wants fewer.
RATE = {"kwok": 6.0, "real": 2.0}
SECONDS_PER_FAULT = {"kwok": 4.0, "real": 4.0}


def options(argv: Sequence[str] | None = None) -> tuple[Options, Path | None]:
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak", description="A seeded chaos soak, judged by an independent checker."
    )
    parser.add_argument("--seed", type=int, default=None, help="replay this seed (default: a fresh one)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--executions", type=int, help="how many Executions (default 10,000; real node 300)")
    size.add_argument("--duration", type=float, help="seconds over which Executions are created")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CI's size: 315 Executions (12 of them names used again, 9 forgotten and applied "
        "again) and 48 faults in 60 s, the faults that stop a process once each",
    )
    parser.add_argument("--node", choices=["kwok", "real"], default="kwok")
    parser.add_argument(
        "--rate", type=float, help="Executions created per second (default: 6 on kwok, 2 on the real node)"
    )
    parser.add_argument(
        "--faults",
        type=int,
        help="how many faults (default: one per 4 s; at least 40)",
    )
    parser.add_argument("--bound", type=float, help="rule 5: seconds to converge after the faults stop")
    parser.add_argument("--rss-bound", type=float, default=300.0, help="rule 6: MiB per operator process")
    parser.add_argument("--out", type=Path, help="write the report (and keep the logs) in this directory")
    arguments = parser.parse_args(argv)
    seed = arguments.seed if arguments.seed is not None else random.SystemRandom().randrange(2**32)
    rate = arguments.rate or RATE[arguments.node]
    if arguments.quick:
        executions, period = 315, 60.0
    elif arguments.duration:
        period = arguments.duration
        executions = int(period * rate)
    else:
        executions = arguments.executions or (300 if arguments.node == "real" else 10_000)
        period = max(executions / rate, 30.0)
    faults = arguments.faults or max(
        40, int(period / SECONDS_PER_FAULT[arguments.node]), 48 if arguments.quick else 0
    )
    out: Path | None = arguments.out
    workdir = (out / f"work-{seed}") if out else Path(tempfile.mkdtemp(prefix=f"soak-{seed}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    return (
        Options(
            seed=seed,
            executions=executions,
            period=period,
            faults=faults,
            node=arguments.node,
            heavy_once=arguments.quick,
            workdir=workdir,
            bound=arguments.bound or (120.0 if arguments.quick else 180.0),
            rss_bound_mib=arguments.rss_bound,
        ),
        out,
    )


def main(argv: Sequence[str] | None = None) -> int:
    signals.exit_on_sigterm()
    chosen, out = options(argv)
    print(f"soak: seed {chosen.seed}", flush=True)
    print(
        f"soak: {chosen.executions} Executions over {chosen.period:.0f}s, {chosen.faults} faults, node "
        f"{chosen.node}, work in {chosen.workdir}",
        flush=True,
    )
    try:
        report = run(chosen)
    except Exception:
        traceback.print_exc()
        print(f"soak: seed {chosen.seed} could not run; logs in {chosen.workdir}", file=sys.stderr)
        return 2
    text = report.markdown()
    print(text)
    if out is not None:
        path = out / f"soak-{chosen.seed}.md"
        path.write_text(text)
        print(f"soak: report in {path}, logs in {chosen.workdir}")
    elif not report.violations:
        shutil.rmtree(chosen.workdir, ignore_errors=True)
    else:
        print(f"soak: logs kept in {chosen.workdir}")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
