"""CI's chaos soak: ``python -m tests.soak --quick`` with a fresh seed each run, so every run
explores another schedule. The seed is printed first; ``python -m tests.soak --quick --seed N``
replays a failure.

It starts its own control plane (it kills kube-apiserver and kwok), the Sentinel set and two
operator replicas, plays 315 Executions under 48 faults of 16 kinds in a minute, then waits for
convergence; about three to four minutes on a 2-core machine. Midway the operators are rolled to
``REDIS_MIN_REPLICAS=0``; after that one ``redis-lost-writes`` fault makes Redis lose acknowledged
writes for real, and names are forgotten (``records forget``) and applied again, two of them
while that fault holds the replicas' links.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.soak import conftest
from tests.soak.__main__ import options
from tests.soak.run import run

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(600)
def test_quick_soak_finds_no_violation(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    seed = random.SystemRandom().randrange(2**32)
    with capsys.disabled():
        print(f"\nquick soak: seed {seed} (replay: python -m tests.soak --quick --seed {seed})", flush=True)
    chosen, _ = options(["--quick", "--seed", str(seed), "--out", str(tmp_path)])
    report = run(chosen)
    text = report.markdown()
    conftest.REPORTS.append(text)

    assert sum(report.tally.created.values()) >= 300, text
    assert report.faults_injected() >= 40, text
    assert report.fault_kinds() >= 6, text
    assert report.ledger.counts()["redis-lost-writes"] >= 1, text
    assert report.tally.forgotten >= 1, text
    assert not report.violations, f"seed {seed}: {len(report.violations)} violations\n{text}"
