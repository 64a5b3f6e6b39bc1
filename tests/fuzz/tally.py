"""What the fuzz test counted: cases, each case's outcome, and the invariants it checked."""

from __future__ import annotations

import collections
import dataclasses


@dataclasses.dataclass
class Tally:
    cases: int = 0
    seed: int | None = None
    violations_planted: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    checks: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    failures: list[str] = dataclasses.field(default_factory=list)
    #: Why the API server refused a case in which nothing was planted (the schemas' own edges).
    unplanted: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    #: Why the API server refused a worker Pod (PodRejected): what the CRDs let through.
    pods_refused: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    def check(self, invariant: str, ok: bool, *, case: str, detail: str = "") -> None:
        self.checks[invariant] += 1
        if not ok:
            self.failures.append(f"{case}: {invariant} {detail}".strip())

    def summary(self) -> str:
        return "\n".join(
            [
                f"seed: {self.seed}",
                f"cases: {self.cases}",
                "planted violations:",
                *(f"  {name}: {count}" for name, count in sorted(self.violations_planted.items())),
                "outcomes:",
                *(f"  {name}: {count}" for name, count in sorted(self.outcomes.items())),
                "refusals of unplanted cases:",
                *(f"  {count} x {reason}" for reason, count in self.unplanted.most_common()),
                "worker Pods the API server refused (PodRejected):",
                *(f"  {count} x {reason}" for reason, count in self.pods_refused.most_common()),
                f"invariant checks: {sum(self.checks.values())}",
                *(f"  {name}: {count}" for name, count in sorted(self.checks.items())),
                f"invariant failures: {len(self.failures)}",
                *(f"  {failure}" for failure in self.failures),
            ]
        )


TALLY = Tally()
