"""The soak's report: one table (faults by kind, Executions by kind, refused Pods, captures
verified, violations and what could not be checked, with the seed), then the first examples of
each finding. Markdown, printed and written to ``--out``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tests.soak.checker.model import Finding
from tests.soak.checker.records import Agreement
from tests.soak.checker.rules import Verdicts
from tests.soak.faults import Ledger
from tests.soak.workload import Tally

RULES = {
    1: "every refused Pod has its own capture (UID, marker), never another Pod's",
    2: "no capture for a Pod that was not refused",
    3: "no delete before the capture was stored",
    4: "no worker Pod and no cleanup-journal entry left",
    5: "every Execution converged within the bound",
    6: "operator memory under the bound; no task died without a restart",
}
EXAMPLES = 5


@dataclass
class Report:
    seed: int
    digest: str
    node: str
    operator: str
    """What was under test (the worktree's commit)."""
    planned_executions: int
    planned_faults: int
    ledger: Ledger
    tally: Tally
    kinds: Mapping[str, int]
    verdicts: Verdicts
    agreements: Sequence[Agreement]
    timings: Mapping[str, float]
    bound: float
    rss_bound_mib: float
    notes: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[Finding]:
        return self.verdicts.violations

    def fault_kinds(self) -> int:
        return len(self.ledger.counts())

    def faults_injected(self) -> int:
        return sum(self.ledger.counts().values())

    def markdown(self) -> str:
        counts = self.verdicts.counts
        faults = self.ledger.counts()
        failed = Counter(i.kind for i in self.ledger.injected if not i.ok)
        violated = Counter(f.rule for f in self.verdicts.findings if f.verdict == "violated")
        unchecked = Counter(f.rule for f in self.verdicts.findings if f.verdict == "unchecked")
        agree = sum(1 for a in self.agreements if a.agrees)
        rows = [
            (
                "seed",
                f"`{self.seed}` (plan {self.digest}; replay: `python -m tests.soak --seed {self.seed} ...`)",
            ),
            ("operator under test", self.operator),
            (
                "faults injected",
                f"**{self.faults_injected()}** of {self.planned_faults} planned, {self.fault_kinds()} kinds: "
                + ", ".join(f"{k} {v}" for k, v in sorted(faults.items()))
                + (f"; failed to inject: {dict(failed)}" if failed else ""),
            ),
            (
                "Executions",
                f"**{sum(self.tally.created.values())}** created of {self.planned_executions} planned: "
                + ", ".join(f"{k} {v}" for k, v in sorted(self.tally.created.items()))
                + f"; names used again {self.tally.reused}"
                + (f" (skipped {len(self.tally.reuse_skipped)})" if self.tally.reuse_skipped else "")
                + "; "
                + ", ".join(f"{k} {v}" for k, v in sorted(self.tally.actions.items())),
            ),
            (
                "Executions ended",
                ", ".join(
                    f"{name.removeprefix('executions ')} {count}"
                    for name, count in sorted(counts.items())
                    if name.startswith("executions ")
                ),
            ),
            ("worker Pods seen", str(counts["worker pods seen"])),
            ("refused Pods (gone)", str(counts["refused pods gone"])),
            (
                "captures verified",
                f"{counts['refused pods with their own capture']} refused Pods with their own capture "
                f"({counts['captures verified by marker']} by marker, "
                f"{counts['captures verified without logs (exit reasons only)']} exit reasons only); "
                f"{counts['deletes with the capture already stored']} deletes seen with the capture stored; "
                f"{counts['captured at launch and again by cleanup (launch kept the Pod)']} captured twice "
                "(launch kept the Pod); "
                f"{counts['pods that failed only once deleted (stopped by the delete)']} failed only once "
                "deleted (not judged as refused)",
            ),
            ("read commands (spec) agree", f"{agree} of {len(self.agreements)}"),
            (
                "convergence",
                f"{counts['seconds to converge after the faults stopped']}s after the faults stopped "
                f"(bound {self.bound:.0f}s)",
            ),
            ("operator peak RSS", f"{counts['peak RSS MiB']} MiB (bound {self.rss_bound_mib:.0f} MiB)"),
            (
                "**violations**",
                f"**{len(self.violations)}**"
                + (
                    ": " + ", ".join(f"rule {r}: {n}" for r, n in sorted(violated.items()))
                    if violated
                    else ""
                ),
            ),
            (
                "could not check",
                str(sum(unchecked.values()))
                + (
                    ": " + ", ".join(f"rule {r}: {n}" for r, n in sorted(unchecked.items()))
                    if unchecked
                    else ""
                ),
            ),
        ]
        lines = [f"# Soak, seed {self.seed}", "", "| | |", "| --- | --- |"]
        lines += [f"| {name} | {value.replace('|', '/')} |" for name, value in rows]
        lines += ["", "Rules: " + "; ".join(f"({n}) {text}" for n, text in RULES.items()) + "."]
        for verdict, title in (("violated", "Violations"), ("unchecked", "Could not check")):
            found = [f for f in self.verdicts.findings if f.verdict == verdict]
            if not found:
                continue
            lines += ["", f"## {title} (seed {self.seed}), first {EXAMPLES} of each rule", ""]
            for rule in sorted({f.rule for f in found}):
                of_rule = [f for f in found if f.rule == rule]
                lines.append(f"- rule {rule} ({RULES[rule]}): {len(of_rule)}")
                lines += [f"  - {f.subject}: {f.detail}" for f in of_rule[:EXAMPLES]]
        disagreeing = [a for a in self.agreements if not a.agrees]
        if disagreeing:
            lines += ["", "## Read commands that disagree", ""]
            lines += [f"- {a.where} {a.slug}/{a.execution}: {a.detail}" for a in disagreeing[:EXAMPLES]]
        if self.tally.failures or self.tally.reuse_skipped or self.notes:
            lines += ["", "## Notes", ""]
            lines += [f"- {n}" for n in self.notes]
            lines += [f"- workload: {f}" for f in self.tally.failures[:EXAMPLES]]
            lines += [f"- name not used again: {s}" for s in self.tally.reuse_skipped[:EXAMPLES]]
        lines += ["", "Timings: " + ", ".join(f"{k} {v:.0f}s" for k, v in self.timings.items()), ""]
        return "\n".join(lines)
