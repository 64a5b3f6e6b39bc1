"""What the fault matrix counted: cases run, faults injected, and every invariant it checked."""

from __future__ import annotations

import collections
import dataclasses


@dataclasses.dataclass
class Ledger:
    cases: int = 0
    faults: int = 0
    checks: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    violations: list[str] = dataclasses.field(default_factory=list)

    def check(self, invariant: str, ok: bool, *, case: str, detail: str = "") -> None:
        self.checks[invariant] += 1
        if not ok:
            self.violations.append(f"{case}: {invariant} {detail}".strip())

    def summary(self) -> str:
        lines = [
            f"cases run: {self.cases}",
            f"faults injected: {self.faults}",
            f"invariant checks: {sum(self.checks.values())}",
            *(f"  {name}: {count}" for name, count in sorted(self.checks.items())),
            f"invariant violations: {len(self.violations)}",
            *(f"  {violation}" for violation in self.violations),
        ]
        return "\n".join(lines)


LEDGER = Ledger()
