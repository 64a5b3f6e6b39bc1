"""Retention with the operator running: the leader's sweep removes a finished execution's records
once they are older than ``AGENTIHOOKS_SWARM_RETENTION_SECONDS`` (seconds here), and not before."""

from __future__ import annotations

import time

import redis.asyncio

from agentihooks_swarm import store as store_
from agentihooks_swarm.storage import keys
from tests.support.failing_workers import PREFIX, SLUG, key, start_failing_worker
from tests.support.fixtures_scene import Scene

RETENTION = 6.0


# Among the slowest tests: it waits out RETENTION after the Execution is Done (short enough to wait
# for, long enough that the records are still there when Done is seen on a loaded machine).
async def test_the_leader_sweeps_a_finished_execution_after_the_retention(scene: Scene) -> None:
    process = scene.start(
        env={
            "AGENTIHOOKS_SWARM_RETENTION_SECONDS": str(RETENTION),
            "AGENTIHOOKS_SWARM_RETENTION_SWEEP_INTERVAL_SECONDS": "1",
        },
    )
    await start_failing_worker(scene, execution="swept")
    await scene.until_phase("swept", "Done", process=process)
    names = [*keys.SWEPT, store_.JOURNAL]
    connection = redis.asyncio.Redis.from_url(scene.redis_url, decode_responses=True)
    try:

        async def held() -> set[str]:
            return {name for name in names if await connection.hexists(key(name), "swept")}

        assert {store_.RETAINED, store_.FINALS, store_.HANDS, store_.OUTCOMES} <= await held()
        assert await connection.smembers(f"{PREFIX}:swarms") == {SLUG}
        written = await connection.zscore(key(store_.RETENTION_INDEX), "swept")  # Its last write.
        assert written is not None

        async def swept() -> bool:
            return not await held()

        await scene.until(swept, what="the sweep", process=process, timeout=RETENTION + 30)
        assert time.time() - written >= RETENTION, "swept before the retention ran out"
        assert await connection.zcard(key(store_.RETENTION_INDEX)) == 0
    finally:
        await connection.aclose()
