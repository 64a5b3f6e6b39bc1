"""Workers that never start, with the operator running: each ends with a record that says why,
with its class, and no Pod left behind (issue 12's proof).

The scenarios are ``tests/support/scenarios.py``; their node side is played by a
:class:`~tests.support.scenarios.Kubelet` (kwok here; a real node's kubelet plays itself).
"""

from __future__ import annotations

import pytest

from tests.support import scenarios
from tests.support.fixtures_scene import Scene
from tests.support.never_started import play


@pytest.mark.parametrize("scenario", scenarios.SCENARIOS, ids=[s.name for s in scenarios.SCENARIOS])
async def test_a_worker_that_never_starts_ends_with_a_record_that_says_why(
    scene: Scene, kubelet: scenarios.Kubelet, scenario: scenarios.Scenario
) -> None:
    await play(scene.api, scene.cluster, scene.namespace, scene.operator, scene.redis_url, kubelet, scenario)
