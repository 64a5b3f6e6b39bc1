"""Issue 12's proof on the real node: workers that never start (an image that cannot be pulled, a
missing Secret, a request no node fits, a memory limit) each end with a record that says why, with
its class, and no Pod left behind — the kubelet, the scheduler and the kernel play themselves."""

from __future__ import annotations

import pytest

from tests.support import scenarios
from tests.support.fixtures_scene import Scene
from tests.support.never_started import play

REAL = [s for s in scenarios.SCENARIOS if s.name != "slow-pull"]


@pytest.mark.parametrize("scenario", REAL, ids=[s.name for s in REAL])
async def test_a_real_worker_that_never_starts_ends_with_a_record_that_says_why(
    scene: Scene, kubelet: scenarios.Kubelet, scenario: scenarios.Scenario
) -> None:
    await play(scene.api, scene.cluster, scene.namespace, scene.operator, scene.redis_url, kubelet, scenario)
