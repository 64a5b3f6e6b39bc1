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
                f"invariant checks: {sum(self.checks.values())}",
                *(f"  {name}: {count}" for name, count in sorted(self.checks.items())),
                f"invariant failures: {len(self.failures)}",
                *(f"  {failure}" for failure in self.failures),
            ]
        )


TALLY = Tally()
