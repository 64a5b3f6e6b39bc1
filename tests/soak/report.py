"""The soak's report: one table (faults by kind, Executions by kind, refused Pods, captures
verified, the writes Redis lost and the records the operators put back, names forgotten and
applied again, violations and what could not be checked, with the seed), then the first examples
of each finding. Markdown, printed and written to ``--out``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tests.soak.checker.model import Finding, OperatorLife
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
    7: "a name's records are its owner's; a forgotten life stays forgotten; a record put back is the owner's",
    8: "an Execution is Done only once its worker Pods are gone or going",
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
    lives: Sequence[OperatorLife] = ()
    """Every operator process of the run (their last scrape of the restore counters)."""
    unreplicated_at: float | None = None

    @property
    def violations(self) -> list[Finding]:
        return self.verdicts.violations

    def fault_kinds(self) -> int:
        return len(self.ledger.counts())

    def faults_injected(self) -> int:
        return sum(self.ledger.counts().values())

    def _durability(self) -> str:
        if self.unreplicated_at is None:
            return "1 for the whole run"
        done = [c for c in self.ledger.changes if c.ok]
        if not done:
            failed = "; ".join(c.detail for c in self.ledger.changes) or "not reached"
            return f"1; the switch to 0 planned at {self.unreplicated_at:.0f}s failed: {failed}"
        change = done[0]
        return f"1, then 0 from {change.started:.0f}s ({change.detail}, {change.ended - change.started:.0f}s)"

    def _lost(self) -> str:
        faults = [i for i in self.ledger.injected if i.kind == "redis-lost-writes" and i.ok]
        if not faults:
            return "no redis-lost-writes fault ran"
        lost = sum(i.lost or 0 for i in faults)
        back = sum(i.back or 0 for i in faults)
        by_hash: Counter[str] = Counter()
        for fault in faults:
            by_hash.update(fault.lost_by_hash)
        return (
            f"**{lost}** acknowledged fields missing on the promoted replica over {len(faults)} faults "
            f"({', '.join(f'{k} {v}' for k, v in sorted(by_hash.items())) or 'none'}); "
            f"{back} of them on the new primary when their fault ended"
        )

    def _restored(self) -> str:
        counts = self.verdicts.counts
        metrics: Counter[str] = Counter()
        skipped: Counter[str] = Counter()
        for life in self.lives:
            metrics.update(life.restored)
            skipped.update(life.restore_skipped)
        logged = counts["records restored (logged)"]
        kinds = ", ".join(
            f"{kind} {counts[f'records restored (logged): {kind}']}"
            for kind in ("startup", "journal", "retained", "owner")
            if counts[f"records restored (logged): {kind}"]
        )
        scraped = _listed(metrics)
        matched = counts["records restored that match (the owner is their life, never a forgotten one)"]
        forgotten = counts["records restored, then forgotten by the user"]
        return (
            f"**{logged}** logged ({kinds or 'none'}); /metrics {int(sum(metrics.values()))} ({scraped}), "
            f"skipped {_listed(skipped)}; each judged by rule 7: {matched} match, {forgotten} forgotten "
            "by the user since"
        )

    def _forgotten(self) -> str:
        counts = self.verdicts.counts
        tally = self.tally
        lives = counts["new lives applied"]
        held = counts["new lives applied while the links were held"]
        pods, gone = counts["new lives: worker Pods"], counts["new lives: worker Pods gone"]
        refused = counts["new lives: refused worker Pods gone"]
        judged = counts["refused pods of forgotten lives (judged just before the forget)"]
        done, attempts = (
            counts["Done attempts whose workers were gone or going"],
            counts["Done attempts judged"],
        )
        return (
            f"**{tally.forgotten}** forgotten ({len(tally.forget_refusals)} refusals, tried again; "
            f"{tally.forget_waited} waited for the gate: held links or a failover); {lives} applied "
            f"again ({held} while a fault held the links), {counts['new lives Done']} Done; their "
            f"worker Pods {pods}, gone {gone} "
            f"(refused {refused}); refused Pods of the forgotten lives judged just before the forget: "
            f"{judged}; Done attempts with their workers gone or going: {done} of {attempts}"
        )

    def markdown(self) -> str:
        lines = [f"# Soak, seed {self.seed}", "", "| | |", "| --- | --- |"]
        lines += [f"| {name} | {value.replace('|', '/')} |" for name, value in self._rows()]
        lines += ["", "Rules: " + "; ".join(f"({n}) {text}" for n, text in RULES.items()) + "."]
        lines += self._findings()
        lines += self._notes()
        lines += ["", "Timings: " + ", ".join(f"{k} {v:.0f}s" for k, v in self.timings.items()), ""]
        return "\n".join(lines)

    def _rows(self) -> list[tuple[str, str]]:
        counts = self.verdicts.counts
        return [
            (
                "seed",
                f"`{self.seed}` (plan {self.digest}; replay: `python -m tests.soak --seed {self.seed} ...`)",
            ),
            ("operator under test", self.operator),
            ("faults injected", self._faults()),
            ("Executions", self._executions()),
            (
                "Executions ended",
                ", ".join(
                    f"{name.removeprefix('executions ')} {count}"
                    for name, count in sorted(counts.items())
                    if name.startswith("executions ")
                ),
            ),
            ("refused-adopted", self._adopted()),
            ("worker Pods seen", str(counts["worker pods seen"])),
            ("refused Pods (gone)", str(counts["refused pods gone"])),
            ("captures verified", self._captures()),
            (
                "read commands (spec) agree",
                f"{sum(1 for a in self.agreements if a.agrees)} of {len(self.agreements)}",
            ),
            ("REDIS_MIN_REPLICAS", self._durability()),
            ("writes Redis lost (redis-lost-writes)", self._lost()),
            ("records put back by the operators", self._restored()),
            ("names forgotten and applied again", self._forgotten()),
            (
                "convergence",
                f"{counts['seconds to converge after the faults stopped']}s after the faults stopped "
                f"(bound {self.bound:.0f}s)",
            ),
            ("operator peak RSS", f"{counts['peak RSS MiB']} MiB (bound {self.rss_bound_mib:.0f} MiB)"),
            ("**violations**", self._by_rule("violated", bold=True)),
            ("could not check", self._by_rule("unchecked", bold=False)),
        ]

    def _faults(self) -> str:
        failed = Counter(i.kind for i in self.ledger.injected if not i.ok)
        return (
            f"**{self.faults_injected()}** of {self.planned_faults} planned, {self.fault_kinds()} kinds: "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.ledger.counts().items()))
            + (f"; failed to inject: {dict(failed)}" if failed else "")
        )

    def _executions(self) -> str:
        tally = self.tally
        return (
            f"**{sum(tally.created.values())}** created of {self.planned_executions} planned: "
            + ", ".join(f"{k} {v}" for k, v in sorted(tally.created.items()))
            + f"; names used again {tally.reused}"
            + (f" (skipped {len(tally.reuse_skipped)})" if tally.reuse_skipped else "")
            + "; "
            + ", ".join(f"{k} {v}" for k, v in sorted(tally.actions.items()))
        )

    def _adopted(self) -> str:
        counts, tally = self.verdicts.counts, self.tally
        seen = counts["refused-adopted: the operator's Pods seen"]
        gone = counts["refused-adopted: the operator's Pods refused and gone"]
        return (
            f"{tally.adopted_planted} worker Pods planted (owned, already failed) for the operator to "
            f"adopt; **{tally.adopted_lost_race}** lost the race (the operator's own create came first, "
            f"the workload's got 409): their worker is the operator's Pod ({seen} seen, {gone} refused "
            f"and gone); {tally.adopted_name_in_use} names used again (Invalid, NameInUse: none planted)"
        )

    def _captures(self) -> str:
        counts = self.verdicts.counts
        return (
            f"{counts['refused pods with their own capture']} refused Pods with their own capture "
            f"({counts['captures verified by marker']} by marker, "
            f"{counts['captures verified without logs (exit reasons only)']} exit reasons only); "
            f"{counts['deletes with the capture already stored']} deletes seen with the capture stored; "
            f"{counts['captured at launch and again by cleanup (launch kept the Pod)']} captured twice "
            "(launch kept the Pod); "
            f"{counts['pods that failed only once deleted (stopped by the delete)']} failed only once "
            "deleted (not judged as refused)"
        )

    def _by_rule(self, verdict: str, *, bold: bool) -> str:
        """How many findings have ``verdict``, and how many of them each rule has."""
        rules = Counter(f.rule for f in self.verdicts.findings if f.verdict == verdict)
        total = sum(rules.values())
        listed = ", ".join(f"rule {r}: {n}" for r, n in sorted(rules.items()))
        return (f"**{total}**" if bold else str(total)) + (f": {listed}" if listed else "")

    def _findings(self) -> list[str]:
        """The first examples of each rule's violations and unchecked findings, and of the read
        commands that disagree."""
        lines: list[str] = []
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
        return lines

    def _notes(self) -> list[str]:
        tally = self.tally
        if not (tally.failures or tally.reuse_skipped or tally.forget_refusals or self.notes):
            return []
        lines = ["", "## Notes", ""]
        lines += [f"- {n}" for n in self.notes]
        lines += [f"- workload: {f}" for f in tally.failures[:EXAMPLES]]
        lines += [f"- name not used again: {s}" for s in tally.reuse_skipped[:EXAMPLES]]
        lines += [f"- records forget refused: {s}" for s in tally.forget_refusals[:EXAMPLES]]
        return lines


def _listed(counted: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(counted.items())) or "none"
